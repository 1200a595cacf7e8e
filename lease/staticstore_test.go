package lease

import (
	"context"
	"testing"
	"time"

	"github.com/randflake/randflake"
)

// The engine on a static store and StaticSource apply the same rule 10:
// the lease starts after now + MaxClockSkew + 1 s and runs to the end of
// Randflake IDs; renewal changes nothing; there is no history to reset.
func TestStaticStoreRule10(t *testing.T) {
	ctx := context.Background()
	st, err := NewStaticStore(100, 163, 1500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	src, err := NewBlockSource(st, BlockSourceConfig{Secret: make16(), Layout: StaticLayout(100, 163)})
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now().Unix()
	l, err := src.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	after := time.Now().Unix()
	if l.FirstNode != 100 || l.LastNode != 163 || l.Start < before+3 || l.Start > after+3 || l.End != randflake.MaxTimestamp {
		t.Errorf("engine on a static store: %+v, want nodes 100-163 from now+1+2 s to MaxTimestamp", l)
	}
	s2, err := (randflake.StaticSource{FirstNode: 100, LastNode: 163, MaxClockSkew: 1500 * time.Millisecond}).Acquire(ctx)
	if err != nil || s2.Start < l.Start || s2.Start > time.Now().Unix()+3 || s2.End != l.End {
		t.Errorf("StaticSource: %+v, %v; the engine gave %+v", s2, err, l)
	}
	if r, err := src.Renew(ctx, l); err != nil || r != l {
		t.Errorf("Renew: %+v, %v; want the lease unchanged", r, err)
	}
	if err := src.ResetHistory(ctx); err == nil {
		t.Error("ResetHistory on a static store succeeded")
	}
	if err := src.Release(ctx, l, l.Start); err != nil {
		t.Error(err)
	}
	if _, err := NewStaticStore(5, 4, 0); err == nil {
		t.Error("NewStaticStore(5, 4) accepted")
	}
	if _, err := NewStaticStore(0, 1, -time.Second); err == nil {
		t.Error("negative skew accepted")
	}
}

func make16() []byte {
	b := make([]byte, 16)
	for i := range b {
		b[i] = byte(i + 1)
	}
	return b
}
