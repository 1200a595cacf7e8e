package randflake

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Lease is a claim on a contiguous range of node IDs for an interval of
// Unix seconds: while it holds, its holder may issue IDs whose node ID is in
// FirstNode..LastNode and whose timestamp is in Start..End, and nobody else
// may. Both ranges are inclusive.
type Lease struct {
	// FirstNode and LastNode bound the node IDs, 0 <= FirstNode <=
	// LastNode <= MaxNode.
	FirstNode, LastNode int64
	// Start is the first second the holder may put in an ID. A source sets
	// it strictly after the newest second any earlier holder of these node
	// IDs may have used, so the holder's IDs cannot collide with theirs
	// even if its clock is behind theirs. It does not change on renewal.
	Start int64
	// End is the last second the holder may put in an ID. A source has
	// recorded it, where the next holder will read it, before handing the
	// lease out. Renewal only moves it forward.
	End int64
}

// Nodes returns the number of node IDs in the lease.
func (l Lease) Nodes() int64 { return l.LastNode - l.FirstNode + 1 }

// String describes the lease for logs: node range and validity in UTC.
func (l Lease) String() string {
	return fmt.Sprintf("node IDs %d-%d from %s to %s", l.FirstNode, l.LastNode, formatSecond(l.Start), formatSecond(l.End))
}

func formatSecond(s int64) string {
	return time.Unix(s, 0).UTC().Format(time.RFC3339)
}

// checkLease checks a lease's seconds: Epoch <= leaseStart <= leaseEnd <=
// MaxTimestamp.
func checkLease(leaseStart, leaseEnd int64) error {
	if leaseEnd < leaseStart || leaseStart < Epoch {
		return ErrInvalidLease
	}
	if leaseEnd > MaxTimestamp {
		return ErrLifetimeOver
	}
	return nil
}

// CheckNodeRange reports whether first..last is a range of node IDs,
// 0 <= first <= last <= MaxNode; the error wraps ErrInvalidNode.
func CheckNodeRange(first, last int64) error {
	if first < 0 || last > MaxNode || first > last {
		return fmt.Errorf("%w (range %d-%d)", ErrInvalidNode, first, last)
	}
	return nil
}

// Validate checks that the lease can back a generator: a range of node
// IDs, and Epoch <= Start <= End <= MaxTimestamp. Lease sources check what
// they hand out with it; Leased checks every lease it is given.
func (l Lease) Validate() error {
	if err := CheckNodeRange(l.FirstNode, l.LastNode); err != nil {
		return err
	}
	if err := checkLease(l.Start, l.End); err != nil {
		return fmt.Errorf("%w (lease from %d to %d)", err, l.Start, l.End)
	}
	return nil
}

// SameClaim reports whether l and o are the same claim: the same node IDs
// from the same start (their ends may differ, as renewal moves them).
func (l Lease) SameClaim(o Lease) bool {
	return l.FirstNode == o.FirstNode && l.LastNode == o.LastNode && l.Start == o.Start
}

// LeaseSource hands out node-ID leases: a fixed range from configuration
// (StaticSource), file locks on one machine (package statedir) or a
// shared store (modules etcdlease, pglease and kubelease). Leased calls its
// methods from one goroutine at a time; a source holds at most one lease at
// a time.
type LeaseSource interface {
	// Acquire claims node IDs. The lease's Start lies strictly after every
	// second an earlier holder of these node IDs may have used, and its End
	// is recorded as the newest second this holder may use.
	Acquire(ctx context.Context) (Lease, error)
	// Renew extends l, the lease last returned. It returns a lease with the
	// same nodes and Start and an End no earlier than l.End, recorded
	// before Renew returns. An error that wraps ErrLeaseLost means the
	// claim is gone for good (the node IDs may pass to someone else after
	// l.End); the source then holds no lease and may Acquire again. Other
	// errors are transient: the lease stays valid until l.End and Renew may
	// be tried again.
	Renew(ctx context.Context, l Lease) (Lease, error)
	// Release gives the node IDs up at once. The caller has stopped
	// issuing IDs on them; lastUsed is the newest second it put in an ID
	// (0 if none), which the source records as the bound the next holder
	// starts after (never less than l.Start-1).
	Release(ctx context.Context, l Lease, lastUsed int64) error
}

// Errors of leases and leased generators.
var (
	// ErrLeaseLost: the lease source no longer holds the node IDs; they may
	// pass to another holder once the lease's End has passed.
	ErrLeaseLost = errors.New("randflake: lease lost, the node IDs may pass to another holder")
	// ErrClosed: the leased generator has been closed.
	ErrClosed = errors.New("randflake: leased generator closed")
)

// StaticSource is a LeaseSource for a node range fixed by configuration,
// such as one derived from a Kubernetes StatefulSet ordinal. Its lease never
// ends, and it records nothing: the deployment guarantees that no two
// processes use the range at the same time (a StatefulSet runs at most one
// pod per ordinal).
//
// A restarted holder must not reuse a second its predecessor may have used,
// and only the clock tells it which seconds those are: its lease starts
// at the second after it acquired it, plus MaxClockSkew rounded up to whole
// seconds. That is safe if the predecessor stopped before the successor
// started and the successor's clock is at most MaxClockSkew behind the
// predecessor's (which matters when the range moves between machines).
type StaticSource struct {
	// FirstNode and LastNode bound the node IDs, inclusive.
	FirstNode, LastNode int64
	// MaxClockSkew is how far the clock of a restarted holder may be
	// behind that of its predecessor; the lease starts that much later.
	MaxClockSkew time.Duration
}

// Acquire returns a lease on the configured range from the next second
// (plus MaxClockSkew) to MaxTimestamp: rule 10 of docs/leases.md, as the
// lease engine (package lease) applies it to its static store.
func (s StaticSource) Acquire(ctx context.Context) (Lease, error) {
	if err := ctx.Err(); err != nil {
		return Lease{}, err
	}
	if s.MaxClockSkew < 0 {
		return Lease{}, errors.New("randflake: negative MaxClockSkew")
	}
	return volatileLease(s.FirstNode, s.LastNode, time.Now().Unix(), s.MaxClockSkew)
}

// volatileLease is the lease of rule 10 on first..last for a process whose
// clock reads now: from the second after now + skew, for as long as Randflake
// IDs last. The lease engine's static store (package lease) gives the same
// lease with a copy of its own, since this package never imports the engine.
func volatileLease(first, last, now int64, skew time.Duration) (Lease, error) {
	l := Lease{FirstNode: first, LastNode: last, Start: now + 1 + ceilSeconds(skew), End: MaxTimestamp}
	if err := l.Validate(); err != nil {
		return Lease{}, err
	}
	return l, nil
}

// ceilSeconds returns d in whole seconds, rounded up.
func ceilSeconds(d time.Duration) int64 { return int64((d + time.Second - 1) / time.Second) }

// Renew returns l unchanged: a static lease does not end.
func (s StaticSource) Renew(ctx context.Context, l Lease) (Lease, error) { return l, nil }

// Release does nothing: a static source records nothing.
func (s StaticSource) Release(ctx context.Context, l Lease, lastUsed int64) error { return nil }

// StatefulSetSource returns the static source of a Kubernetes StatefulSet
// pod: the pod with ordinal k gets node IDs k*nodesPerPod to
// (k+1)*nodesPerPod-1, so replicas x nodesPerPod must not exceed 131,072.
//
// The ordinal is read from the environment variable env, which may hold the
// ordinal itself (from the pod label apps.kubernetes.io/pod-index through
// the downward API) or the pod name, whose suffix after the last '-' is the
// ordinal ("web-3"). If env is empty or unset, the host name is used, which
// in a StatefulSet is the pod name.
func StatefulSetSource(env string, nodesPerPod int64) (StaticSource, error) {
	if nodesPerPod < 1 || nodesPerPod > MaxNode+1 {
		return StaticSource{}, fmt.Errorf("randflake: nodes per pod must be between 1 and %d, not %d", MaxNode+1, nodesPerPod)
	}
	name, from := "", "host name"
	if env != "" {
		name, from = os.Getenv(env), "$"+env
	}
	if name == "" {
		h, err := os.Hostname()
		if err != nil {
			return StaticSource{}, fmt.Errorf("randflake: StatefulSet ordinal: %w", err)
		}
		name, from = h, "host name"
	}
	ord, err := parseOrdinal(name)
	if err != nil {
		return StaticSource{}, fmt.Errorf("randflake: StatefulSet ordinal from %s %q: %w", from, name, err)
	}
	if ord > (MaxNode+1)/nodesPerPod-1 {
		return StaticSource{}, fmt.Errorf("randflake: StatefulSet ordinal %d x %d node IDs per pod exceeds the %d node IDs", ord, nodesPerPod, MaxNode+1)
	}
	return StaticSource{FirstNode: ord * nodesPerPod, LastNode: (ord+1)*nodesPerPod - 1}, nil
}

// ordinalRule is the rule parseOrdinal applies, for its errors.
const ordinalRule = "want a pod name ending in -ORDINAL, or ORDINAL alone, where ORDINAL is 0 or a decimal number without a sign or a leading zero, and the name before the dash ends in a letter or digit"

// parseOrdinal reads "3" or "web-3" as 3. The ordinal is 0 or a decimal
// number without a sign or a leading zero, alone or after the last '-' of a
// name whose part before that '-' ends in a letter or digit (as a
// StatefulSet's name does). Anything else ("-1", "01", "web-01", "web--1",
// " 3") is refused, since reading it as some ordinal could give two pods
// the same node IDs.
func parseOrdinal(s string) (int64, error) {
	num := s
	if i := strings.LastIndexByte(s, '-'); i >= 0 {
		name := s[:i]
		if name == "" || !isAlnum(name[len(name)-1]) {
			return 0, errors.New(ordinalRule)
		}
		num = s[i+1:]
	}
	if num == "" || len(num) > 1 && num[0] == '0' || strings.IndexFunc(num, func(r rune) bool { return r < '0' || r > '9' }) >= 0 {
		return 0, errors.New(ordinalRule)
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s (%q is out of range)", ordinalRule, num)
	}
	return n, nil
}

func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}
