// Package bench compares the randflake generators with popular Go ID
// generators. It is a module of its own so that the peers never become
// dependencies of the randflake library.
package bench

import (
	"strconv"
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
		Secret: secret, FirstNode: 0, LastNode: 1023,
		LeaseStart: now - 10, LeaseEnd: now + 24*3600,
	})
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// generator is one ID generator under test: a function that returns one ID
// (as any value, so that nothing is optimised away) or fails.
type generator struct {
	name string
	make func(b *testing.B) func() error
}

// Typed sinks keep results alive without boxing them into interfaces.
var (
	sinkInt64     int64
	sinkUint64    uint64
	sinkSnowflake snowflake.ID
	sinkXID       xid.ID
	sinkUUID      uuid.UUID
	sinkULID      ulid.ULID
	sinkKSUID     ksuid.KSUID
)

func generators() []generator {
	return []generator{
		{"randflake.Sharded", func(b *testing.B) func() error {
			s := newSharded(b)
			return func() error { id, err := s.Generate(); sinkInt64 = id; return err }
		}},
		{"randflake.Generator", func(b *testing.B) func() error {
			now := time.Now().Unix()
			g, err := randflake.NewGenerator(1, now-10, now+24*3600, secret)
			if err != nil {
				b.Fatal(err)
			}
			return func() error {
				for {
					id, err := g.Generate()
					if err != randflake.ErrResourceExhausted {
						sinkInt64 = id
						return err
					}
					// One node ID: 131,072 IDs a second at most.
					time.Sleep(time.Millisecond)
				}
			}
		}},
		{"bwmarrin/snowflake", func(b *testing.B) func() error {
			n, err := snowflake.NewNode(1)
			if err != nil {
				b.Fatal(err)
			}
			return func() error { sinkSnowflake = n.Generate(); return nil }
		}},
		{"sony/sonyflake", func(b *testing.B) func() error {
			sf, err := sonyflake.New(sonyflake.Settings{MachineID: func() (uint16, error) { return 1, nil }})
			if err != nil {
				b.Fatal(err)
			}
			return func() error { id, err := sf.NextID(); sinkUint64 = id; return err }
		}},
		{"rs/xid", func(b *testing.B) func() error {
			return func() error { sinkXID = xid.New(); return nil }
		}},
		{"google/uuid.v4", func(b *testing.B) func() error {
			return func() error { id, err := uuid.NewRandom(); sinkUUID = id; return err }
		}},
		{"google/uuid.v7", func(b *testing.B) func() error {
			return func() error { id, err := uuid.NewV7(); sinkUUID = id; return err }
		}},
		{"oklog/ulid.v2", func(b *testing.B) func() error {
			return func() error { sinkULID = ulid.Make(); return nil }
		}},
		{"segmentio/ksuid", func(b *testing.B) func() error {
			return func() error { id, err := ksuid.NewRandom(); sinkKSUID = id; return err }
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
			for i := 0; i < b.N; i++ {
				if err := gen(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkGenerateParallel measures one ID per call from GOMAXPROCS
// goroutines.
func BenchmarkGenerateParallel(b *testing.B) {
	for _, g := range generators() {
		b.Run(g.name, func(b *testing.B) {
			gen := g.make(b)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := gen(); err != nil {
						b.Error(err)
						return
					}
				}
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
