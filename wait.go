package randflake

import (
	"context"
	"time"
)

// The GenerateContext methods: when a generator's second is used up, they
// wait for the next one instead of failing.

// timeSourcePoll is how often a wait for the next second reads a
// generator's TimeSource: its second boundaries are unknown.
const timeSourcePoll = 10 * time.Millisecond

// waitAfter waits until the generator's clock (timeSource, or the wall
// clock) reads a second after sec, the one exhausted, which err reports.
// With the wall clock it sleeps until the next second boundary and moves
// the coarse clock on (wallNow), so that the next Generate sees the new
// second at once. It returns nil when the second has passed or stop is
// closed (the generator closed: its next call says so), and a
// *waitError if ctx is done first.
func waitAfter(ctx context.Context, sec int64, timeSource func() int64, stop <-chan struct{}, err error) error {
	for {
		var d time.Duration
		if timeSource != nil {
			if timeSource() > sec {
				return nil
			}
			d = timeSourcePoll
		} else {
			if wallNow() > sec {
				return nil
			}
			d = max(time.Until(time.Unix(sec+1, 0)), time.Millisecond)
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return &waitError{exhausted: err, ctx: ctx.Err()}
		case <-stop:
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// waitError is a GenerateContext that stopped waiting for the next second
// because its context was done: it wraps both the exhaustion and the
// context's error.
type waitError struct {
	exhausted error // the *exhaustedError
	ctx       error // ctx.Err()
}

func (e *waitError) Error() string {
	return e.exhausted.Error() + "; stopped waiting for the next second: " + e.ctx.Error()
}

// Unwrap returns the exhaustion error and the context's error, so that
// errors.Is finds ErrResourceExhausted as well as context.Canceled or
// context.DeadlineExceeded.
func (e *waitError) Unwrap() []error { return []error{e.exhausted, e.ctx} }

// generateContext runs generate until it returns an ID or an error other
// than a used-up second, waiting for the next second in between (see
// Generator.GenerateContext).
func generateContext(ctx context.Context, generate func() (int64, error), timeSource func() func() int64, stop <-chan struct{}) (int64, error) {
	for {
		id, err := generate()
		if err == nil {
			return id, nil
		}
		sec, ok := exhaustedSecond(err)
		if !ok {
			return 0, err
		}
		if err := waitAfter(ctx, sec, timeSource(), stop, err); err != nil {
			return 0, err
		}
	}
}

// GenerateContext returns a new encrypted ID like Generate, but when every
// ID of the current second has been issued it waits for the next second
// instead of returning ErrResourceExhausted: it sleeps until the clock's
// next second begins (with a TimeSource, whose seconds it cannot foresee,
// it reads the TimeSource every 10ms) and tries again. Other errors,
// ErrConsistencyViolation included, are returned as Generate returns them.
//
// ctx is consulted only while waiting: an ID available at once is returned
// whatever ctx's state. If ctx is done during a wait, GenerateContext
// returns an error that wraps both ErrResourceExhausted and ctx.Err() (test
// it with errors.Is). Such a wait reserved nothing: no ID was taken or
// skipped.
func (g *Generator) GenerateContext(ctx context.Context) (int64, error) {
	return generateContext(ctx, g.Generate, func() func() int64 { return g.TimeSource }, nil)
}

// GenerateContext returns a new encrypted ID like Generate, waiting for
// the next second when every node ID of the range has used up the current
// one (see Generator.GenerateContext).
func (s *Sharded) GenerateContext(ctx context.Context) (int64, error) {
	return generateContext(ctx, s.Generate, func() func() int64 { return s.timeSource }, nil)
}

// GenerateContext returns a new encrypted ID like Generate, waiting for
// the next second when the generator's node range has used up the current
// one (see Generator.GenerateContext). For a Local of a Leased generator,
// the rules of Leased.GenerateContext apply.
func (l *Local) GenerateContext(ctx context.Context) (int64, error) {
	var stop <-chan struct{}
	if l.leased != nil {
		stop = l.leased.done
	}
	return generateContext(ctx, l.Generate, func() func() int64 { return l.s.timeSource }, stop)
}

// GenerateContext returns a new encrypted ID like Generate, waiting for
// the next second when the lease's node range has used up the current one
// (see Generator.GenerateContext). A wait ends early when the generator is
// closed (GenerateContext then returns ErrClosed). If the lease ends or is
// lost while it waits, GenerateContext returns what Generate returns at the
// end of the wait: an ID if the lease was renewed or a new one acquired
// meanwhile, or else the *LeaseError (the rules of Leased apply).
func (l *Leased) GenerateContext(ctx context.Context) (int64, error) {
	return generateContext(ctx, l.Generate, func() func() int64 { return l.timeSource }, l.done)
}
