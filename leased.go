package randflake

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// LeasedConfig configures a Leased generator.
type LeasedConfig struct {
	// Secret is the 16-byte key shared by every generator of the
	// deployment.
	Secret []byte
	// Source hands out the node IDs. Leased calls it from one goroutine at
	// a time and never shares it: give each Leased its own source.
	Source LeaseSource
	// Shards is the number of shards of the underlying Sharded generator
	// (0: one per CPU).
	Shards int
	// TimeSource, if set, returns the current Unix time in seconds for the
	// generator (see ShardedConfig.TimeSource). Renewals are timed by the
	// wall clock either way.
	TimeSource func() int64
	// OnError, if set, is called from the renewal goroutine with every
	// error of the source: failed renewals (the generator keeps issuing
	// until the lease's end) and failed acquisitions after a lease was
	// lost. It must not block for long.
	OnError func(error)
	// Logger, if set, receives the lease's events: acquired, waiting for
	// its start, renewal failed (with the source's error), renewed after
	// failures, lost, re-acquired and released (with the newest second
	// used). Each names the node range ("nodes"), the first second the
	// lease lets the generator use ("start": the lease's Start, or the
	// second it was acquired in if Start is earlier, as it is for node IDs
	// nobody has used) and its end ("end"). Nil logs nothing.
	Logger *slog.Logger
}

// Leased is a Sharded generator bound to a LeaseSource: it takes its node
// IDs from the source, renews the lease in the background well before it
// ends, and issues nothing outside a valid lease.
//
// A third of the way through the lease's remaining validity it renews; if
// renewal fails, it tries again, more often as the end nears, and issues
// IDs until the lease's end and none after it: from then on Generate
// returns a *LeaseError, which wraps ErrInvalidLease and the source's
// error. A later successful renewal resumes issuing. If the source reports
// the lease lost (ErrLeaseLost), the generator stops at once and acquires a
// new lease, possibly on other node IDs, as soon as the source grants one.
//
// Close stops renewal and releases the lease, reporting the newest second
// used so the next holder can start right after it.
//
// A Leased is safe for concurrent use.
type Leased struct {
	Inspector  // reads IDs back under the generator's secret
	src        LeaseSource
	shards     int
	timeSource func() int64
	onError    func(error)
	log        *slog.Logger
	cipher     *Sparx64

	gen     atomic.Pointer[Sharded]    // nil while no lease is held
	failure atomic.Pointer[LeaseError] // the source's last error, until it succeeds again
	closed  atomic.Bool

	mu    sync.Mutex
	lease Lease // the last lease held
	held  bool  // whether lease is held now
	from  int64 // the first second lease lets the generator use (see logLease)

	backoff    time.Duration // delay between failed acquisitions (renewal goroutine only)
	failLogged time.Time     // when a failed renewal was last logged (renewal goroutine only)

	cancel    context.CancelFunc
	done      chan struct{} // closed when the renewal goroutine returns
	closeOnce sync.Once
	closeErr  error
}

// LeaseError is returned by a Leased generator that has no valid lease
// after its lease source failed: the lease could not be renewed before its
// end, or a lost lease could not be replaced. It wraps ErrInvalidLease and
// the source's error.
type LeaseError struct {
	Lease Lease // the last lease held (zero if none was)
	Err   error // the source's error
}

// Error describes the lease and the source's error.
func (e *LeaseError) Error() string {
	if e.Lease == (Lease{}) {
		return "randflake: no lease on node IDs: " + e.Err.Error()
	}
	return fmt.Sprintf("randflake: no valid lease on node IDs %d-%d (the last one ends at %s): %v",
		e.Lease.FirstNode, e.Lease.LastNode, formatSecond(e.Lease.End), e.Err)
}

// Unwrap returns ErrInvalidLease and the source's error.
func (e *LeaseError) Unwrap() []error { return []error{ErrInvalidLease, e.Err} }

// NewLeased acquires a lease from cfg.Source and returns a generator on it.
// If the lease starts in the future (its node IDs' previous holder may have
// used seconds up to then), NewLeased waits for the start, within ctx. ctx
// bounds only the start-up; the generator renews its lease until Close.
func NewLeased(ctx context.Context, cfg LeasedConfig) (*Leased, error) {
	if cfg.Source == nil {
		return nil, errors.New("randflake: LeasedConfig.Source is nil")
	}
	if cfg.Shards < 0 {
		return nil, errors.New("randflake: negative shard count")
	}
	c, err := newIDCipher(cfg.Secret)
	if err != nil {
		return nil, err
	}
	l := &Leased{
		Inspector:  Inspector{c},
		src:        cfg.Source,
		shards:     cfg.Shards,
		timeSource: cfg.TimeSource,
		onError:    cfg.OnError,
		log:        cfg.Logger,
		cipher:     c,
		done:       make(chan struct{}),
	}
	lease, g, err := l.acquireLease(ctx)
	if err != nil {
		return nil, err
	}
	l.lease, l.held, l.from = lease, true, l.firstSecond(lease)
	l.gen.Store(g)
	l.logLease(slog.LevelInfo, "randflake: lease acquired", lease)
	loopCtx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	go l.run(loopCtx, l.renewDelay(lease))
	if l.now() < lease.Start {
		l.logLease(slog.LevelInfo, "randflake: waiting for the lease to start (a previous holder may have used the seconds before it)", lease)
	}
	if err := l.waitStart(ctx, lease.Start); err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		l.Close(rctx)
		return nil, fmt.Errorf("randflake: waiting for the lease to start at %s: %w", formatSecond(lease.Start), err)
	}
	return l, nil
}

// acquireLease acquires a lease and builds its generator.
func (l *Leased) acquireLease(ctx context.Context) (Lease, *Sharded, error) {
	lease, err := l.src.Acquire(ctx)
	if err != nil {
		return Lease{}, nil, err
	}
	if err := lease.Validate(); err != nil {
		_ = l.src.Release(ctx, lease, 0)
		return Lease{}, nil, fmt.Errorf("randflake: lease source returned an unusable lease: %w", err)
	}
	return lease, newSharded(l.cipher, lease, l.shards, l.timeSource), nil
}

func (l *Leased) now() int64 {
	if l.timeSource != nil {
		return l.timeSource()
	}
	return coarseNow()
}

// waitStart waits until the generator's clock reaches start.
func (l *Leased) waitStart(ctx context.Context, start int64) error {
	for {
		if l.now() >= start {
			return nil
		}
		d := 10 * time.Millisecond
		if l.timeSource == nil {
			d = max(time.Until(time.Unix(start, 0)), 2*time.Millisecond)
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// run renews the lease until ctx is cancelled.
func (l *Leased) run(ctx context.Context, delay time.Duration) {
	defer close(l.done)
	t := time.NewTimer(delay)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		t.Reset(l.step(ctx))
	}
}

// step renews or re-acquires the lease and returns the delay until the
// next step.
func (l *Leased) step(ctx context.Context) time.Duration {
	l.mu.Lock()
	cur, held := l.lease, l.held
	l.mu.Unlock()
	if !held {
		return l.reacquire(ctx, cur)
	}
	next, err := l.src.Renew(ctx, cur)
	if err == nil && (!next.SameClaim(cur) || next.End < cur.End || next.Validate() != nil) {
		err = fmt.Errorf("randflake: lease source renewed %v as %v", cur, next)
	}
	if err != nil {
		if ctx.Err() != nil {
			return time.Hour // closing
		}
		l.fail(cur, err)
		if errors.Is(err, ErrLeaseLost) {
			l.logLease(slog.LevelError, "randflake: lease lost: no more IDs on these node IDs", cur, "err", err)
			if g := l.gen.Swap(nil); g != nil {
				g.retire()
			}
			l.mu.Lock()
			l.held = false
			l.mu.Unlock()
			l.backoff = 0
			return time.Millisecond
		}
		if time.Since(l.failLogged) >= 5*time.Second {
			l.failLogged = time.Now()
			l.logLease(slog.LevelWarn, "randflake: lease renewal failed; IDs are issued until the lease's end", cur, "err", err)
		}
		return l.retryDelay(cur)
	}
	if l.failure.Load() != nil {
		l.failLogged = time.Time{}
		l.logLease(slog.LevelWarn, "randflake: lease renewed late, after failures", next)
	}
	if next.End > cur.End {
		if g := l.gen.Load(); g != nil {
			g.UpdateLease(next.Start, next.End)
		}
	}
	l.mu.Lock()
	l.lease = next
	l.mu.Unlock()
	l.failure.Store(nil)
	return l.renewDelay(next)
}

// reacquire acquires a new lease after one was lost.
func (l *Leased) reacquire(ctx context.Context, last Lease) time.Duration {
	lease, g, err := l.acquireLease(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return time.Hour // closing
		}
		l.fail(last, err)
		l.backoff = min(max(2*l.backoff, 250*time.Millisecond), 5*time.Second)
		l.logLease(slog.LevelWarn, "randflake: no new lease yet", last, "err", err, "retry", l.backoff)
		return l.backoff
	}
	l.mu.Lock()
	l.lease, l.held, l.from = lease, true, l.firstSecond(lease)
	l.mu.Unlock()
	l.gen.Store(g)
	l.failure.Store(nil)
	l.logLease(slog.LevelInfo, "randflake: lease acquired", lease)
	return l.renewDelay(lease)
}

func (l *Leased) fail(lease Lease, err error) {
	l.failure.Store(&LeaseError{Lease: lease, Err: err})
	if l.onError != nil {
		l.onError(err)
	}
}

// firstSecond returns the first second lease, just acquired, lets the
// generator use: its Start, or the current second if Start is earlier. (A
// source starts a lease on node IDs with no recorded use right after the
// epoch, 2024-10-27T03:33:20Z; logged as the start, that read like a clock
// gone wrong.)
func (l *Leased) firstSecond(lease Lease) int64 {
	now := wallNow()
	if l.timeSource != nil {
		now = l.timeSource()
	}
	return max(lease.Start, now)
}

// logLease logs a lease event, if there is a logger. Its start is the
// first second the lease lets the generator use (see firstSecond).
func (l *Leased) logLease(level slog.Level, msg string, lease Lease, args ...any) {
	if l.log == nil {
		return
	}
	l.mu.Lock()
	start, cur := l.from, l.lease
	l.mu.Unlock()
	if !lease.SameClaim(cur) {
		start = lease.Start
	}
	args = append([]any{"nodes", fmt.Sprintf("%d-%d", lease.FirstNode, lease.LastNode),
		"start", formatSecond(start), "end", formatSecond(lease.End)}, args...)
	l.log.Log(context.Background(), level, msg, args...)
}

// untilEnd returns the time left until the lease's end second is over.
func (l *Leased) untilEnd(lease Lease) time.Duration {
	if l.timeSource != nil {
		return time.Duration(lease.End+1-l.timeSource()) * time.Second
	}
	return time.Until(time.Unix(lease.End+1, 0))
}

// renewDelay is the delay until the renewal of a fresh lease: a third of
// its remaining validity.
func (l *Leased) renewDelay(lease Lease) time.Duration {
	return max(l.untilEnd(lease)/3, 10*time.Millisecond)
}

// retryDelay is the delay until another try at a failed renewal: a
// quarter of the remaining validity, between 50ms and 500ms.
func (l *Leased) retryDelay(lease Lease) time.Duration {
	left := l.untilEnd(lease)
	if left <= 0 {
		return 250 * time.Millisecond
	}
	return min(max(left/4, 50*time.Millisecond), 500*time.Millisecond)
}

// explain turns the generator's ErrInvalidLease into ErrClosed or a
// *LeaseError when there is a reason to tell.
func (l *Leased) explain(err error) error {
	if err != ErrInvalidLease {
		return err
	}
	if l.closed.Load() {
		return ErrClosed
	}
	if f := l.failure.Load(); f != nil {
		return f
	}
	return err
}

// Generate returns a new encrypted ID (see Sharded.Generate).
func (l *Leased) Generate() (int64, error) {
	if l.closed.Load() {
		return 0, ErrClosed
	}
	g := l.gen.Load()
	if g == nil {
		return 0, l.explain(ErrInvalidLease)
	}
	return l.explainID(g.Generate())
}

// explainID is a Generate's result, its error explained.
func (l *Leased) explainID(id int64, err error) (int64, error) {
	if err != nil {
		return 0, l.explain(err)
	}
	return id, nil
}

// GenerateString returns a new encrypted ID in its string form.
func (l *Leased) GenerateString() (string, error) { return stringOf(l.Generate()) }

// GenerateBatch fills dst with new IDs (see Sharded.GenerateBatch). It
// returns the number written; if that is less than len(dst), the error
// says why.
func (l *Leased) GenerateBatch(dst []int64) (int, error) {
	if l.closed.Load() {
		return 0, ErrClosed
	}
	g := l.gen.Load()
	if g == nil {
		return 0, l.explain(ErrInvalidLease)
	}
	n, err := g.GenerateBatch(dst)
	if err != nil {
		err = l.explain(err)
	}
	return n, err
}

// Lease returns the current lease, or the last one held while the
// generator holds none (after it was lost, or after Close).
func (l *Leased) Lease() Lease {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lease
}

// Close stops renewing, stops issuing IDs and releases the lease, telling
// the source the newest second used. It returns the source's error; the
// generator is closed either way. ctx bounds the release.
func (l *Leased) Close(ctx context.Context) error {
	l.closeOnce.Do(func() {
		l.closed.Store(true)
		l.cancel()
		<-l.done
		var last int64
		if g := l.gen.Swap(nil); g != nil {
			last = g.retire()
		}
		l.mu.Lock()
		lease, held := l.lease, l.held
		l.held = false
		l.mu.Unlock()
		if held {
			l.closeErr = l.src.Release(ctx, lease, last)
			if l.closeErr != nil {
				l.logLease(slog.LevelError, "randflake: lease release failed; the node IDs are free once the lease has expired", lease, "err", l.closeErr)
			} else {
				used := "none" // no ID was issued under the lease
				if last >= lease.Start {
					used = formatSecond(last)
				}
				l.logLease(slog.LevelInfo, "randflake: lease released", lease, "last_used", used)
			}
		}
	})
	return l.closeErr
}
