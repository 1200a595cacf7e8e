package randflake

import (
	"database/sql"
	"database/sql/driver"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

var (
	_ fmt.Stringer             = ID(0)
	_ encoding.TextMarshaler   = ID(0)
	_ encoding.TextUnmarshaler = (*ID)(nil)
	_ json.Marshaler           = ID(0)
	_ json.Unmarshaler         = (*ID)(nil)
	_ driver.Valuer            = ID(0)
	_ sql.Scanner              = (*ID)(nil)
	_ encoding.BinaryMarshaler = ID(0)
)

func TestEncodeDecodeRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	vals := []int64{0, 1, -1, 31, 32, 1<<63 - 1, -1 << 63}
	for range 100000 {
		vals = append(vals, int64(rng.Uint64()>>rng.IntN(64)))
	}
	for _, v := range vals {
		s := EncodeString(v)
		if len(s) < 1 || len(s) > 13 || (len(s) > 1 && s[0] == '0') {
			t.Fatalf("EncodeString(%d) = %q", v, s)
		}
		got, err := DecodeString(s)
		if err != nil || got != v {
			t.Fatalf("DecodeString(%q) = %d, %v; want %d", s, got, err, v)
		}
		if up, err := DecodeString(strings.ToUpper(s)); err != nil || up != v {
			t.Fatalf("upper case %q: %d, %v", strings.ToUpper(s), up, err)
		}
		if string(AppendString([]byte("x"), v)) != "x"+s {
			t.Fatal("AppendString differs from EncodeString")
		}
	}
}

func TestDecodeStringStrict(t *testing.T) {
	bad := []string{
		"",               // empty
		"00000000000000", // 14 characters
		"g000000000000",  // 13 characters, over 64 bits
		"vvvvvvvvvvvvv",  // over 64 bits
		"w", "z", "-1", " 1", "1 ", "1=", "=", "a.b", "é", "\x00",
	}
	for _, s := range bad {
		if v, err := DecodeString(s); !errors.Is(err, ErrInvalidID) {
			t.Errorf("DecodeString(%q) = %d, %v; want ErrInvalidID", s, v, err)
		}
		if _, err := ParseID(s); !errors.Is(err, ErrInvalidID) {
			t.Errorf("ParseID(%q) accepted", s)
		}
		g := newTestGenerator(t, 0, newFakeClock(testStart))
		if _, _, _, err := g.InspectString(s); !errors.Is(err, ErrInvalidID) {
			t.Errorf("InspectString(%q) accepted", s)
		}
	}
	// The largest value in 13 characters, and leading zeros.
	if v, err := DecodeString("fvvvvvvvvvvvv"); err != nil || v != -1 {
		t.Errorf("max: %d, %v", v, err)
	}
	if v, err := DecodeString("0000000000001"); err != nil || v != 1 {
		t.Errorf("leading zeros: %d, %v", v, err)
	}
}

func TestIDJSON(t *testing.T) {
	type event struct {
		ID   ID  `json:"id"`
		Prev *ID `json:"prev,omitempty"`
	}
	id := ID(-2990835006926556165)
	b, err := json.Marshal(event{ID: id})
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `{"id":"dcvjbd135dsvr"}` {
		t.Fatalf("JSON %s", b)
	}
	var e event
	if err := json.Unmarshal(b, &e); err != nil || e.ID != id {
		t.Fatalf("round trip: %d, %v", e.ID, err)
	}
	// A JSON number is accepted too.
	if err := json.Unmarshal([]byte(`{"id":-2990835006926556165}`), &e); err != nil || e.ID != id {
		t.Fatalf("number: %d, %v", e.ID, err)
	}
	for _, bad := range []string{`{"id":"xyz!"}`, `{"id":1.5}`, `{"id":true}`, `{"id":"dcvjbd135dsvrr"}`, `{"id":99999999999999999999}`} {
		if err := json.Unmarshal([]byte(bad), &e); err == nil {
			t.Errorf("accepted %s", bad)
		}
	}
}

func TestIDTextBinarySQL(t *testing.T) {
	id := ID(4594531474933654033)
	if id.String() != "3vgoe12ccb8gh" {
		t.Fatalf("String %q", id.String())
	}
	txt, _ := id.MarshalText()
	var back ID
	if err := back.UnmarshalText(txt); err != nil || back != id {
		t.Fatal("text round trip")
	}
	bin, _ := id.MarshalBinary()
	back = 0
	if err := back.UnmarshalBinary(bin); err != nil || back != id || len(bin) != 8 {
		t.Fatal("binary round trip")
	}
	if err := back.UnmarshalBinary(bin[:7]); err == nil {
		t.Fatal("short binary accepted")
	}
	v, err := id.Value()
	if err != nil || v.(int64) != int64(id) {
		t.Fatalf("Value %v %v", v, err)
	}
	for _, src := range []any{int64(id), "3vgoe12ccb8gh", []byte("3vgoe12ccb8gh"), "4594531474933654033", []byte("4594531474933654033")} {
		back = 0
		if err := back.Scan(src); err != nil || back != id {
			t.Errorf("Scan(%v) = %d, %v", src, back, err)
		}
	}
	for _, src := range []any{nil, 1.5, true, "!!", []byte{}} {
		if err := back.Scan(src); err == nil {
			t.Errorf("Scan(%#v) accepted", src)
		}
	}
}
