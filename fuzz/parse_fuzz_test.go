package fuzz

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/randflake/randflake"
)

// canonical is the form EncodeString gives for a string DecodeString
// accepted: lowercase without leading zeros.
func canonical(s string) string {
	s = strings.TrimLeft(strings.ToLower(s), "0")
	if s == "" {
		return "0"
	}
	return s
}

// FuzzDecodeString: DecodeString never panics, rejects what is not 1 to 13
// base32hex digits, and what it accepts encodes back to its canonical form.
func FuzzDecodeString(f *testing.F) {
	for _, s := range []string{"", "0", "3vgoe12ccb8gh", "fvvvvvvvvvvvv", "g000000000000", "VVV", "a=", "00000000000001", "é"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := randflake.DecodeString(s)
		if err != nil {
			if v != 0 {
				t.Fatalf("error with value %d", v)
			}
			return
		}
		if len(s) == 0 || len(s) > 13 {
			t.Fatalf("accepted %q of length %d", s, len(s))
		}
		if got := randflake.EncodeString(v); got != canonical(s) {
			t.Fatalf("DecodeString(%q) = %d, which encodes as %q", s, v, got)
		}
		id, err := randflake.ParseID(s)
		if err != nil || int64(id) != v {
			t.Fatalf("ParseID(%q) = %d, %v", s, id, err)
		}
	})
}

// FuzzEncodeString: every int64 round-trips through its string form.
func FuzzEncodeString(f *testing.F) {
	f.Add(int64(0))
	f.Add(int64(-1))
	f.Add(int64(-232447010193727000))
	f.Fuzz(func(t *testing.T, v int64) {
		s := randflake.EncodeString(v)
		if len(s) == 0 || len(s) > 13 || s != canonical(s) {
			t.Fatalf("EncodeString(%d) = %q", v, s)
		}
		got, err := randflake.DecodeString(s)
		if err != nil || got != v {
			t.Fatalf("DecodeString(EncodeString(%d)) = %d, %v", v, got, err)
		}
	})
}

// FuzzIDUnmarshal: the ID's JSON, text, binary and SQL decoders never
// panic, and what they accept marshals back to an equal ID.
func FuzzIDUnmarshal(f *testing.F) {
	for _, s := range []string{`"3vgoe12ccb8gh"`, `123`, `-5`, `null`, `"`, `""`, `1e3`, `"zz"`, `18446744073709551616`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var id randflake.ID
		if err := json.Unmarshal(b, &id); err == nil {
			out, err := json.Marshal(id)
			if err != nil {
				t.Fatal(err)
			}
			var back randflake.ID
			if err := json.Unmarshal(out, &back); err != nil || back != id {
				t.Fatalf("JSON %s -> %d -> %s -> %d, %v", b, id, out, back, err)
			}
		}
		var tid randflake.ID
		if err := tid.UnmarshalText(b); err == nil {
			if tid.String() != canonical(string(b)) {
				t.Fatalf("text %q -> %s", b, tid)
			}
		}
		var bid randflake.ID
		if err := bid.UnmarshalBinary(b); err == nil {
			out, _ := bid.MarshalBinary()
			if string(out) != string(b) {
				t.Fatalf("binary %x -> %x", b, out)
			}
		}
		var sid randflake.ID
		_ = sid.Scan(b)
		_ = sid.Scan(string(b))
	})
}
