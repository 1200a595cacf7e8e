package fuzz

import (
	"errors"
	"testing"

	"github.com/randflake/randflake/uniqueid"
)

// FuzzParse checks that Parse never panics, that everything it accepts has
// one of the two lengths and re-encodes to exactly the input, and that it
// agrees with Valid.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"ZVPxAMAAAgoAABCSEjQAAAAH",
		"ZVPxAI86UcIH5JttIKoSNAAAAAc",
		"aw2Hg_RvD3h0_97gJ1aCsQAAAAI",
		"ZVPxAI86UcIH5JttIKoSNAAAAAd",
		"ZVPxAMAAAgoAABCSEjQAAA_H",
		"ZVPxAI86UcIH5JttIKo@NAAAAAc",
		"",
		"@@@@@@@@@@@@@@@@@@@@@@@@",
		"___________________________",
		"ZVPxAI86UcIH5JttIKoSNAAAAAc=",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := uniqueid.Parse(s)
		if uniqueid.Valid(s) != (err == nil) {
			t.Fatalf("uniqueid.Valid(%q) disagrees with Parse error %v", s, err)
		}
		if err != nil {
			if !errors.Is(err, uniqueid.ErrMalformed) {
				t.Fatalf("uniqueid.Parse(%q) error %v does not wrap uniqueid.ErrMalformed", s, err)
			}
			return
		}
		if len(s) != tok.Layout.EncodedLen() {
			t.Fatalf("uniqueid.Parse(%q) accepted length %d as %v", s, len(s), tok.Layout)
		}
		if got := tok.String(); got != s {
			t.Fatalf("uniqueid.Parse(%q).String() = %q", s, got)
		}
		back, err := uniqueid.Parse(tok.String())
		if err != nil || back != tok {
			t.Fatalf("re-parse of %q: %+v, %v; want %+v", s, back, err, tok)
		}
	})
}
