package uniqueid

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// Independent reference encoders from the standard library.
var (
	refClassic = base64.NewEncoding(classicAlphabet).WithPadding(base64.NoPadding).Strict()
	refCurrent = base64.RawURLEncoding.Strict()
)

func TestParseDocExamples(t *testing.T) {
	tok, err := Parse("ZVPxAMAAAgoAABCSEjQAAAAH")
	if err != nil {
		t.Fatal(err)
	}
	want := Token{
		Layout: Classic, Time: time.Unix(1700000000, 0).UTC(),
		Addr: netip.MustParseAddr("192.0.2.10"), PID: 4242, Counter: 4660, ThreadIndex: 7,
	}
	if tok != want {
		t.Errorf("classic: got %+v, want %+v", tok, want)
	}

	tok, err = Parse("ZVPxAI86UcIH5JttIKoSNAAAAAc")
	if err != nil {
		t.Fatal(err)
	}
	want = Token{
		Layout: Current, Time: time.Unix(1700000000, 0).UTC(),
		Root:    [RootLen]byte{0x8f, 0x3a, 0x51, 0xc2, 0x07, 0xe4, 0x9b, 0x6d, 0x20, 0xaa},
		Counter: 4660, ThreadIndex: 7,
	}
	if tok != want {
		t.Errorf("current: got %+v, want %+v", tok, want)
	}
}

func TestRoundTripAgainstStdlib(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 20000; i++ {
		var raw [currentRawLen]byte
		for j := range raw {
			raw[j] = byte(r.Uint32())
		}
		// Classic.
		s := refClassic.EncodeToString(raw[:classicRawLen])
		tok, err := Parse(s)
		if err != nil {
			t.Fatalf("Parse(%q): %v", s, err)
		}
		if tok.Layout != Classic ||
			tok.Time.Unix() != int64(binary.BigEndian.Uint32(raw[0:4])) ||
			tok.Addr != netip.AddrFrom4([4]byte(raw[4:8])) ||
			tok.PID != binary.BigEndian.Uint32(raw[8:12]) ||
			tok.Counter != binary.BigEndian.Uint16(raw[12:14]) ||
			tok.ThreadIndex != binary.BigEndian.Uint32(raw[14:18]) {
			t.Fatalf("Parse(%q) = %+v, fields differ from % x", s, tok, raw[:classicRawLen])
		}
		if got := tok.String(); got != s {
			t.Fatalf("String() = %q, want %q", got, s)
		}
		// Current.
		s = refCurrent.EncodeToString(raw[:])
		tok, err = Parse(s)
		if err != nil {
			t.Fatalf("Parse(%q): %v", s, err)
		}
		if tok.Layout != Current ||
			tok.Time.Unix() != int64(binary.BigEndian.Uint32(raw[0:4])) ||
			tok.Root != [RootLen]byte(raw[4:14]) ||
			tok.Counter != binary.BigEndian.Uint16(raw[14:16]) ||
			tok.ThreadIndex != binary.BigEndian.Uint32(raw[16:20]) {
			t.Fatalf("Parse(%q) = %+v, fields differ from % x", s, tok, raw)
		}
		if got := tok.String(); got != s {
			t.Fatalf("String() = %q, want %q", got, s)
		}
	}
}

func TestParseMalformed(t *testing.T) {
	classicOK := "ZVPxAMAAAgoAABCSEjQAAAAH"
	currentOK := "ZVPxAI86UcIH5JttIKoSNAAAAAc"
	cases := []struct {
		name, in, msg string
	}{
		{"empty", "", "length 0"},
		{"short", classicOK[:23], "length 23"},
		{"between", classicOK + "AA", "length 26"},
		{"long", currentOK + "A", "length 28"},
		{"huge", strings.Repeat("A", 1<<20), "length 1048576"},
		{"padded classic", classicOK[:22] + "==", "'=' at offset 22"},
		{"padded current", currentOK[:26] + "=", "'=' at offset 26"},
		{"underscore in classic", "_" + classicOK[1:], "'_' at offset 0 is not in the classic alphabet"},
		{"at in current", currentOK[:5] + "@" + currentOK[6:], "'@' at offset 5 is not in the current alphabet"},
		{"std base64 plus", classicOK[:3] + "+" + classicOK[4:], "'+'"},
		{"std base64 slash", currentOK[:3] + "/" + currentOK[4:], "'/'"},
		{"space", classicOK[:10] + " " + classicOK[11:], "' ' at offset 10"},
		{"nul", currentOK[:10] + "\x00" + currentOK[11:], `'\x00' at offset 10`},
		{"non-ascii", classicOK[:22] + "é", `'\xc3' at offset 22`},
		{"spare bits", currentOK[:26] + "d", "non-zero unused bits"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tok, err := Parse(c.in)
			if err == nil {
				t.Fatalf("Parse accepted %q as %+v", c.in, tok)
			}
			if !errors.Is(err, ErrMalformed) {
				t.Errorf("error %v does not wrap ErrMalformed", err)
			}
			if !strings.Contains(err.Error(), c.msg) {
				t.Errorf("error %q does not mention %q", err, c.msg)
			}
			if len(err.Error()) > 200 {
				t.Errorf("error message is %d bytes long", len(err.Error()))
			}
			if Valid(c.in) {
				t.Errorf("Valid(%q) = true", c.in)
			}
			if tok != (Token{}) {
				t.Errorf("Parse returned non-zero token %+v with error", tok)
			}
		})
	}
}

// The 27th character of a Current token carries 4 data bits and 2 unused
// bits; exactly the 16 characters with zero unused bits are acceptable.
func TestCurrentSpareBits(t *testing.T) {
	prefix := "ZVPxAI86UcIH5JttIKoSNAAAAA"
	accepted := 0
	for i := 0; i < 64; i++ {
		s := prefix + currentAlphabet[i:i+1]
		tok, err := Parse(s)
		if (i&3 == 0) != (err == nil) {
			t.Errorf("symbol %d (%q): err = %v", i, currentAlphabet[i], err)
			continue
		}
		if err == nil {
			accepted++
			if tok.String() != s {
				t.Errorf("String() = %q, want %q", tok.String(), s)
			}
		}
	}
	if accepted != 16 {
		t.Errorf("accepted %d final symbols, want 16", accepted)
	}
}

func TestTokenEncodeErrors(t *testing.T) {
	ok := time.Unix(1700000000, 0)
	cases := []struct {
		name string
		tok  Token
	}{
		{"zero", Token{}},
		{"bad layout", Token{Layout: 3, Time: ok}},
		{"zero time", Token{Layout: Current}},
		{"before 1970", Token{Layout: Current, Time: time.Unix(-1, 0)}},
		{"after 2106", Token{Layout: Current, Time: time.Unix(1<<32, 0)}},
		{"classic without addr", Token{Layout: Classic, Time: ok}},
		{"classic ipv6", Token{Layout: Classic, Time: ok, Addr: netip.MustParseAddr("2001:db8::1")}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, err := c.tok.MarshalText(); !errors.Is(err, ErrInvalidToken) {
				t.Errorf("MarshalText error = %v, want ErrInvalidToken", err)
			}
			if s := c.tok.String(); s != "" {
				t.Errorf("String() = %q, want empty", s)
			}
		})
	}
}

func TestTokenEncodeEdges(t *testing.T) {
	// Extremes of the timestamp, a v4-mapped address and sub-second time.
	tok := Token{Layout: Classic, Time: time.Unix(1<<32-1, 999999999), Addr: netip.MustParseAddr("::ffff:10.1.2.3")}
	s := tok.String()
	back, err := Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	if back.Time.Unix() != 1<<32-1 || back.Addr != netip.MustParseAddr("10.1.2.3") {
		t.Errorf("round trip of %+v gave %+v", tok, back)
	}
	tok = Token{Layout: Current, Time: time.Unix(0, 0), PID: 99}
	if s := tok.String(); s != strings.Repeat("A", CurrentLen) {
		t.Errorf("epoch current token = %q", s)
	}
	// AppendText appends.
	b, err := tok.AppendText([]byte("id="))
	if err != nil || string(b) != "id="+strings.Repeat("A", CurrentLen) {
		t.Errorf("AppendText = %q, %v", b, err)
	}
}

func TestTextMarshaling(t *testing.T) {
	type rec struct {
		ID Token `json:"id"`
	}
	in := `{"id":"ZVPxAI86UcIH5JttIKoSNAAAAAc"}`
	var r rec
	if err := json.Unmarshal([]byte(in), &r); err != nil {
		t.Fatal(err)
	}
	if r.ID.Layout != Current || r.ID.Counter != 4660 {
		t.Errorf("unmarshaled %+v", r.ID)
	}
	out, err := json.Marshal(r)
	if err != nil || string(out) != in {
		t.Errorf("Marshal = %s, %v; want %s", out, err, in)
	}
	if err := json.Unmarshal([]byte(`{"id":"nope"}`), &r); !errors.Is(err, ErrMalformed) {
		t.Errorf("Unmarshal of bad token: %v", err)
	}
}

func TestLayout(t *testing.T) {
	if Classic.String() != "classic" || Current.String() != "current" || Layout(0).String() != "Layout(0)" {
		t.Error("Layout.String")
	}
	if Classic.EncodedLen() != 24 || Current.EncodedLen() != 27 || Layout(9).EncodedLen() != 0 {
		t.Error("Layout.EncodedLen")
	}
}

func TestParseAllocs(t *testing.T) {
	for _, s := range []string{"ZVPxAMAAAgoAABCSEjQAAAAH", "ZVPxAI86UcIH5JttIKoSNAAAAAc"} {
		if n := testing.AllocsPerRun(100, func() {
			if _, err := Parse(s); err != nil {
				t.Fatal(err)
			}
		}); n != 0 {
			t.Errorf("Parse(%q) allocates %v times", s, n)
		}
	}
}
