// Package bench compares the randflake generators with popular Go ID
// generators. It is a module of its own so that the peers never become
// dependencies of the randflake library.
package bench

import (
	"encoding/binary"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bwmarrin/snowflake"
	"github.com/google/uuid"
	"github.com/oklog/ulid/v2"
	"github.com/randflake/randflake"
	"github.com/rs/xid"
	"github.com/segmentio/ksuid"
	"github.com/sony/sonyflake"
)

var secret = []byte("bench-secret-key")

func newSharded(b *testing.B) *randflake.Sharded {
	now := time.Now().Unix()
	s, err := randflake.NewSharded(randflake.ShardedConfig{
		Secret: secret, FirstNode: 0, LastNode: randflake.MaxNode,
		LeaseStart: now - 10, LeaseEnd: now + 24*3600,
	})
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// generator is one ID generator under test. make returns a function that
// generates one ID and returns 8 bytes of it, which the benchmark folds into
// a goroutine-local value so that nothing is optimised away and no shared
// memory is written per ID.
//
// perGoroutine, when set, is for generators whose handles must not be shared
// between goroutines: BenchmarkGenerateParallel calls it once instead of
// make, and every goroutine calls the constructor it returns to get a
// generating function of its own, all on the state perGoroutine set up.
type generator struct {
	name         string
	make         func(b *testing.B) func() (uint64, error)
	perGoroutine func(b *testing.B) func() func() (uint64, error)
}

// localGen returns a function that generates IDs from a new Local handle
// on s.
func localGen(s *randflake.Sharded) func() (uint64, error) {
	l := s.NewLocal()
	return func() (uint64, error) { id, err := l.Generate(); return uint64(id), err }
}

func first8(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }

var sink atomic.Uint64

func generators() []generator {
	return []generator{
		{name: "randflake.Sharded", make: func(b *testing.B) func() (uint64, error) {
			s := newSharded(b)
			return func() (uint64, error) { id, err := s.Generate(); return uint64(id), err }
		}},
		{name: "randflake.Local",
			make: func(b *testing.B) func() (uint64, error) { return localGen(newSharded(b)) },
			perGoroutine: func(b *testing.B) func() func() (uint64, error) {
				s := newSharded(b)
				return func() func() (uint64, error) { return localGen(s) }
			}},
		{name: "randflake.Generator", make: func(b *testing.B) func() (uint64, error) {
			now := time.Now().Unix()
			g, err := randflake.NewGenerator(1, now-10, now+24*3600, secret)
			if err != nil {
				b.Fatal(err)
			}
			return func() (uint64, error) {
				for {
					id, err := g.Generate()
					if !errors.Is(err, randflake.ErrResourceExhausted) {
						return uint64(id), err
					}
					// One node ID: 131,072 IDs a second at most.
					time.Sleep(time.Millisecond)
				}
			}
		}},
		{name: "bwmarrin/snowflake", make: func(b *testing.B) func() (uint64, error) {
			n, err := snowflake.NewNode(1)
			if err != nil {
				b.Fatal(err)
			}
			return func() (uint64, error) { return uint64(n.Generate()), nil }
		}},
		{name: "sony/sonyflake", make: func(b *testing.B) func() (uint64, error) {
			sf, err := sonyflake.New(sonyflake.Settings{MachineID: func() (uint16, error) { return 1, nil }})
			if err != nil {
				b.Fatal(err)
			}
			return func() (uint64, error) { return sf.NextID() }
		}},
		{name: "rs/xid", make: func(b *testing.B) func() (uint64, error) {
			return func() (uint64, error) { id := xid.New(); return first8(id[:]), nil }
		}},
		{name: "google/uuid.v4", make: func(b *testing.B) func() (uint64, error) {
			return func() (uint64, error) { id, err := uuid.NewRandom(); return first8(id[:]), err }
		}},
		{name: "google/uuid.v7", make: func(b *testing.B) func() (uint64, error) {
			return func() (uint64, error) { id, err := uuid.NewV7(); return first8(id[8:]), err }
		}},
		{name: "oklog/ulid.v2", make: func(b *testing.B) func() (uint64, error) {
			return func() (uint64, error) { id := ulid.Make(); return first8(id[8:]), nil }
		}},
		{name: "segmentio/ksuid", make: func(b *testing.B) func() (uint64, error) {
			return func() (uint64, error) { id, err := ksuid.NewRandom(); return first8(id[12:]), err }
		}},
	}
}

// BenchmarkGenerate measures one ID per call on one goroutine.
func BenchmarkGenerate(b *testing.B) {
	for _, g := range generators() {
		b.Run(g.name, func(b *testing.B) {
			gen := g.make(b)
			b.ReportAllocs()
			b.ResetTimer()
			var acc uint64
			for i := 0; i < b.N; i++ {
				v, err := gen()
				if err != nil {
					b.Fatal(err)
				}
				acc ^= v
			}
			sink.Add(acc)
		})
	}
}

// BenchmarkGenerateParallel measures one ID per call from GOMAXPROCS
// goroutines: on one shared generator, or on one handle per goroutine where
// the generator has a per-goroutine constructor.
func BenchmarkGenerateParallel(b *testing.B) {
	for _, g := range generators() {
		b.Run(g.name, func(b *testing.B) {
			var newGen func() func() (uint64, error)
			if g.perGoroutine != nil {
				newGen = g.perGoroutine(b)
			} else {
				shared := g.make(b)
				newGen = func() func() (uint64, error) { return shared }
			}
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				gen := newGen()
				var acc uint64
				for pb.Next() {
					v, err := gen()
					if err != nil {
						b.Error(err)
						return
					}
					acc ^= v
				}
				sink.Add(acc)
			})
		})
	}
}

// BenchmarkGenerateBatch measures randflake's batch path, ns per ID.
func BenchmarkGenerateBatch(b *testing.B) {
	s := newSharded(b)
	for _, n := range []int{64, 1024, 65536} {
		b.Run("randflake.Sharded/n="+strconv.Itoa(n), func(b *testing.B) {
			buf := make([]int64, n)
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if _, err := s.GenerateBatch(buf); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/ID")
		})
	}
}
