package randflake

import (
	"strconv"
	"testing"
	"time"
)

func benchSharded(b *testing.B) *Sharded {
	now := time.Now().Unix()
	s, err := NewSharded(ShardedConfig{Secret: testSecret, FirstNode: 0, LastNode: MaxNode,
		LeaseStart: now - 10, LeaseEnd: now + 24*3600})
	if err != nil {
		b.Fatal(err)
	}
	return s
}

func BenchmarkGenerator(b *testing.B) {
	now := time.Now().Unix()
	g, err := NewGenerator(1, now-10, now+24*3600, testSecret)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("Generate", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if _, err := g.Generate(); err != nil {
				// One node ID gives 131,072 IDs a second; wait for the next.
				time.Sleep(time.Millisecond)
			}
		}
	})
}

func BenchmarkSharded(b *testing.B) {
	s := benchSharded(b)
	b.Run("Generate", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if _, err := s.Generate(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("GenerateParallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := s.Generate(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	for _, n := range []int{64, 1024, 65536} {
		b.Run("GenerateBatch/n="+strconv.Itoa(n), func(b *testing.B) {
			b.ReportAllocs()
			buf := make([]int64, n)
			for i := 0; i < b.N; i++ {
				if _, err := s.GenerateBatch(buf); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/ID")
		})
	}
}
