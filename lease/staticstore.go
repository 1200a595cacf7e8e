package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/randflake/randflake"
)

// NewStaticStore returns the BlockStore of a node range fixed by
// configuration: first..last, one block, claimed by whoever asks. It
// records nothing (StoreInfo.Durable is false), so BlockSource applies rule
// 10 of docs/leases.md to it: the deployment guarantees that no two
// processes use the range at once, and a lease starts after now +
// maxClockSkew, the most a restarted holder's clock may be behind its
// predecessor's.
func NewStaticStore(first, last int64, maxClockSkew time.Duration) (BlockStore, error) {
	if err := randflake.CheckNodeRange(first, last); err != nil {
		return nil, err
	}
	if maxClockSkew < 0 {
		return nil, errors.New("randflake: negative MaxClockSkew")
	}
	return &staticStore{first: first, last: last, skew: maxClockSkew}, nil
}

// StaticLayout returns the layout of a static store: one block, the range.
func StaticLayout(first, last int64) BlockLayout {
	return BlockLayout{FirstNode: first, LastNode: last, Size: last - first + 1}
}

type staticStore struct {
	first, last int64
	skew        time.Duration
}

func (s *staticStore) Info() StoreInfo {
	return StoreInfo{Name: fmt.Sprintf("static node IDs %d-%d", s.first, s.last), MaxClockSkew: s.skew}
}

// Update shows the one block, free, and claims it when asked.
func (s *staticStore) Update(ctx context.Context, held StoreClaim, all bool, fn func(*StoreView) (*StoreChanges, error)) (StoreClaim, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ch, err := fn(&StoreView{Blocks: []BlockState{{First: s.first, Last: s.last, Held: held != nil}}})
	if err != nil {
		return nil, err
	}
	if len(ch.Claim) > 0 {
		return s, nil
	}
	return held, nil
}

// Renew has nothing to keep alive.
func (s *staticStore) Renew(ctx context.Context, held StoreClaim) (StoreIdentity, error) {
	return StoreIdentity{}, nil
}

// volatileLease is the lease of rule 10 on first..last for a process whose
// clock reads now: from the second after now + skew, for as long as Randflake
// IDs last. randflake.StaticSource hands out the same lease with its own copy
// of this function (the root package does not import this one);
// TestStaticStoreRule10 checks that the two agree.
func volatileLease(first, last, now int64, skew time.Duration) (randflake.Lease, error) {
	l := randflake.Lease{FirstNode: first, LastNode: last, Start: now + 1 + ceilSeconds(skew), End: randflake.MaxTimestamp}
	if err := l.Validate(); err != nil {
		return randflake.Lease{}, err
	}
	return l, nil
}
