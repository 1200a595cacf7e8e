package uniqueid

import (
	"testing"
)

// FuzzRoundTrip encodes arbitrary records with the reference encoders of
// the standard library and checks that Parse and String agree with them.
func FuzzRoundTrip(f *testing.F) {
	f.Add([]byte("0123456789abcdefghij"))
	f.Add(make([]byte, 20))
	f.Fuzz(func(t *testing.T, raw []byte) {
		if len(raw) < currentRawLen {
			return
		}
		for _, c := range []struct {
			s      string
			layout Layout
		}{
			{refClassic.EncodeToString(raw[:classicRawLen]), Classic},
			{refCurrent.EncodeToString(raw[:currentRawLen]), Current},
		} {
			tok, err := Parse(c.s)
			if err != nil || tok.Layout != c.layout || tok.String() != c.s {
				t.Fatalf("%q: %+v, %v", c.s, tok, err)
			}
		}
	})
}
