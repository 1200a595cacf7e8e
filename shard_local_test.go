package randflake

import (
	"errors"
	"sync"
	"testing"
	"time"
)

// Locals on many goroutines and Generate/GenerateBatch beside them: no
// duplicates; one node ID's second is used up exactly.
func TestLocalUniqueAndExhaustion(t *testing.T) { forEachKernel(t, testLocalUniqueAndExhaustion) }

func testLocalUniqueAndExhaustion(t *testing.T) {
	clk := newFakeClock(testStart + 30)
	s := newTestSharded(t, 5, 5, clk, 4)
	var mu sync.Mutex
	var ids []int64
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []int64
			l := s.NewLocal()
			for {
				var id int64
				var err error
				if w < 4 {
					id, err = l.Generate()
				} else {
					id, err = s.Generate()
				}
				if err != nil {
					if !errors.Is(err, ErrResourceExhausted) {
						t.Error(err)
					}
					break
				}
				mine = append(mine, id)
			}
			mu.Lock()
			ids = append(ids, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	checkUnique(t, ids)
	if len(ids) > IDsPerSecond || len(ids) < IDsPerSecond-4*bufferIDs-s.maxBuffered() {
		t.Fatalf("%d IDs from one node in one second", len(ids))
	}
	for _, id := range ids {
		if ts, node, _, _ := s.Inspect(id); ts != testStart+30 || node != 5 {
			t.Fatalf("Inspect: %d %d", ts, node)
		}
	}
}

func TestLocalFreshnessAndLease(t *testing.T) { forEachKernel(t, testLocalFreshnessAndLease) }

func testLocalFreshnessAndLease(t *testing.T) {
	clk := newFakeClock(testStart + 100)
	s, err := NewSharded(ShardedConfig{Secret: testSecret, FirstNode: 0, LastNode: 3,
		LeaseStart: testStart, LeaseEnd: testStart + 110, TimeSource: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	l := s.NewLocal()
	var ids []int64
	for step := 0; step < 20; step++ {
		for range 1 + step*29 {
			id, err := l.Generate()
			if clk.Now() > testStart+110 {
				if !errors.Is(err, ErrInvalidLease) {
					t.Fatalf("after the lease: %v", err)
				}
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			if ts, _, _, _ := s.Inspect(id); ts < clk.Now()-1 || ts > testStart+110 {
				t.Fatalf("clock %d: ID from second %d", clk.Now(), ts)
			}
			ids = append(ids, id)
		}
		clk.Add(int64(step % 3))
	}
	checkUnique(t, ids)
}

func BenchmarkLocal(b *testing.B) {
	now := time.Now().Unix()
	s, err := NewSharded(ShardedConfig{Secret: testSecret, FirstNode: 0, LastNode: MaxNode, LeaseStart: now - 10, LeaseEnd: now + 24*3600})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("Generate", func(b *testing.B) {
		b.ReportAllocs()
		l := s.NewLocal()
		for i := 0; i < b.N; i++ {
			if _, err := l.Generate(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("GenerateParallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			l := s.NewLocal()
			for pb.Next() {
				if _, err := l.Generate(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
