package testserver

import "testing"

// StartRefused refuses a closed server first, then a running one.
func TestStartRefused(t *testing.T) {
	for _, c := range []struct {
		closed, running bool
		want            string
	}{
		{false, false, ""},
		{true, false, "closed"},
		{false, true, "running"},
		{true, true, "closed"},
	} {
		got := ""
		if err := StartRefused(c.closed, c.running, "closed", "running"); err != nil {
			got = err.Error()
		}
		if got != c.want {
			t.Errorf("StartRefused(closed %v, running %v): %q, want %q (\"\": nil)", c.closed, c.running, got, c.want)
		}
	}
}
