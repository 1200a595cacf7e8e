package kubelease

import (
	"fmt"
	"time"

	"github.com/randflake/randflake"
)

// dateResolution is the resolution of the API server's Date header, the
// one clock of the server a client can read: whole seconds.
const dateResolution = time.Second

// margin is how long before the claim could lapse, beyond the clock
// allowances, the generator stops.
func margin(ttl time.Duration) time.Duration {
	return max(ttl/10, 200*time.Millisecond)
}

// known returns how far a holder's clock is known to be from the API
// server's after the check: MaxClockSkew plus the Date header's second.
func known(skew time.Duration) time.Duration { return skew + dateResolution }

// endFor returns the last second a holder may use after a claim or
// renewal begun at t0 (see the package documentation, "Time"): the last
// whole second that ends a margin before t0 + TTL - 2 x (MaxClockSkew +
// 1 s).
func endFor(t0 time.Time, ttl, skew time.Duration) int64 {
	return min(t0.Add(ttl-2*known(skew)-margin(ttl)).Unix()-1, randflake.MaxTimestamp)
}

// checkSkew checks the API server's Date header, read in an answer to a
// request sent at t0 and answered at t1 on this machine's clock, against
// the bound skew. The header counts whole seconds (it is the server's
// clock truncated), so the check passes when the second it names could
// hold a server time within skew of [t0, t1].
func checkSkew(rep reply, skew time.Duration) error {
	if rep.date.IsZero() {
		return fmt.Errorf("%w: the API server's answer has no Date header to check this machine's clock against", ErrClockSkew)
	}
	lo, hi := rep.date, rep.date.Add(dateResolution)
	if !hi.After(rep.t0.Add(-skew)) || lo.After(rep.t1.Add(skew)) {
		return fmt.Errorf("%w: the API server's Date header read %s while this machine's clock read %s to %s (MaxClockSkew %v)",
			ErrClockSkew, rep.date.UTC().Format(time.RFC1123), rep.t0.UTC().Format(time.RFC3339Nano), rep.t1.UTC().Format(time.RFC3339Nano), skew)
	}
	return nil
}
