package uniqueid

import (
	"net/netip"
	"testing"
	"time"
)

var benchSink Token

func BenchmarkAppend(b *testing.B) {
	cg, err := NewClassic(netip.MustParseAddr("192.0.2.1"))
	if err != nil {
		b.Fatal(err)
	}
	ug, err := NewCurrent()
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		gen  interface{ Append([]byte) []byte }
	}{{"classic", cg}, {"current", ug}} {
		b.Run(bc.name, func(b *testing.B) {
			buf := make([]byte, 0, CurrentLen)
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				buf = bc.gen.Append(buf[:0])
			}
		})
		b.Run(bc.name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				buf := make([]byte, 0, CurrentLen)
				for pb.Next() {
					buf = bc.gen.Append(buf[:0])
				}
			})
		})
	}
}

// BenchmarkAppendAt leaves out the clock, whose cost depends on the
// platform (a vDSO call on Linux).
func BenchmarkAppendAt(b *testing.B) {
	ug, err := NewCurrent()
	if err != nil {
		b.Fatal(err)
	}
	at := time.Unix(1700000000, 0)
	buf := make([]byte, 0, CurrentLen)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		buf = ug.AppendAt(buf[:0], at)
	}
}

func BenchmarkGenerateString(b *testing.B) {
	ug, err := NewCurrent()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := ug.GenerateString(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParse(b *testing.B) {
	for _, bc := range []struct{ name, tok string }{
		{"classic", "ZVPxAMAAAgoAABCSEjQAAAAH"},
		{"current", "ZVPxAI86UcIH5JttIKoSNAAAAAc"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				tok, err := Parse(bc.tok)
				if err != nil {
					b.Fatal(err)
				}
				benchSink = tok
			}
		})
	}
}

func BenchmarkString(b *testing.B) {
	tok, err := Parse("ZVPxAI86UcIH5JttIKoSNAAAAAc")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	buf := make([]byte, 0, CurrentLen)
	for i := 0; i < b.N; i++ {
		buf, _ = tok.AppendText(buf[:0])
	}
}
