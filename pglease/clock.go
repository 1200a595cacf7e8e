package pglease

import (
	"fmt"
	"time"

	"github.com/randflake/randflake"
)

// margin is how long before the claim could lapse, on this machine's clock
// and beyond the clock-skew allowance, the generator stops.
func margin(ttl time.Duration) time.Duration {
	return max(ttl/10, 200*time.Millisecond)
}

// endFor returns the last second a holder may use after a claim or renewal
// sent at t0: the last whole second that ends margin before t0 + TTL -
// 2 x MaxClockSkew (see the package documentation), at most MaxTimestamp.
func endFor(t0 time.Time, ttl, skew time.Duration) int64 {
	return min(t0.Add(ttl-2*skew-margin(ttl)).Unix()-1, randflake.MaxTimestamp)
}

// checkSkew checks the server's clock reading srv, taken between t0 and t1
// on this machine's clock, against the bound skew.
func checkSkew(t0, t1, srv time.Time, skew time.Duration) error {
	// The server's timestamps have microseconds; allow for the rounding.
	k := skew + time.Millisecond
	if srv.Before(t0.Add(-k)) || srv.After(t1.Add(k)) {
		return fmt.Errorf("%w: the server's clock read %s while this machine's read %s to %s (MaxClockSkew %v)",
			ErrClockSkew, srv.UTC().Format(time.RFC3339Nano), t0.UTC().Format(time.RFC3339Nano), t1.UTC().Format(time.RFC3339Nano), skew)
	}
	return nil
}
