//go:build chaos

package chaos

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// idLine is the part of the summary about the IDs: "1234567 IDs, 0
// duplicates, 0 (second,node) shared".
func (r *report) idLine() string {
	return fmt.Sprintf("%d IDs, %d duplicates, %d (second,node) shared", r.total, r.dups, r.shared)
}

func (s *server) errorSummary() string {
	s.coll.mu.Lock()
	defer s.coll.mu.Unlock()
	return countsString(s.coll.errs)
}

// waitAllIssuing waits until every server in one of the states (serving,
// if none is given) has issued an ID fetched after since, and returns
// those that have not.
func (f *fleet) waitAllIssuing(since time.Time, timeout time.Duration, states ...string) []*server {
	if len(states) == 0 {
		states = []string{"serving"}
	}
	deadline := time.Now().Add(timeout)
	for {
		var idle []*server
		for _, s := range f.all() {
			if slices.Contains(states, s.getState()) && s.coll.lastOK.Load() <= since.UnixNano() {
				idle = append(idle, s)
			}
		}
		if len(idle) == 0 || time.Now().After(deadline) {
			return idle
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// summarize prints the summary: the head line, then one line each for the
// clients' errors, the processes, the node ranges, the checks and the
// start-ups, then extra.
func (f *fleet) summarize(r *report, head string, extra []string, rangeSize int64) {
	prefix := "chaos " + f.cfg.name + ": "
	fmt.Println(head)
	fmt.Println(prefix + f.errorLine())
	if spans := f.unexpectedSpans(); len(spans) > 0 {
		fmt.Println(prefix + "unexpected client errors, by server: " + strings.Join(spans, ", "))
	}
	var procs []string
	ends := map[string]int{}
	var unclean []string
	counts := make([]int, 0, len(r.procs))
	for _, ps := range r.procs {
		s := ps.s
		s.mu.Lock()
		ended := s.ended
		if ended == "" {
			ended = s.state
		}
		s.mu.Unlock()
		procs = append(procs, fmt.Sprintf("%s %d (%s)", s.name, ps.n, ended))
		kind, _, _ := strings.Cut(ended, ":")
		ends[kind]++
		if strings.Contains(ended, ":") {
			unclean = append(unclean, s.name+" "+ended)
		}
		counts = append(counts, ps.n)
	}
	if len(procs) <= 12 {
		fmt.Println(prefix + "IDs per process: " + strings.Join(procs, ", "))
	} else {
		slices.Sort(counts)
		fmt.Printf("%sIDs per process: %d processes, fewest %d, median %d, most %d; ended: %s\n",
			prefix, len(counts), counts[0], counts[len(counts)/2], counts[len(counts)-1], countsString(ends))
		for _, u := range unclean {
			fmt.Println(prefix + "ended badly: " + u)
		}
	}
	lines, handed, minGap := r.handovers(rangeSize, f.start)
	if len(lines) <= 12 {
		for _, l := range lines {
			fmt.Println(prefix + "node range " + l)
		}
	}
	gap := ""
	if handed > 0 {
		gap = fmt.Sprintf(", the shortest gap between two holders' IDs %ds", minGap)
	}
	fmt.Printf("%snode ranges: %d used, %d by more than one process%s\n", prefix, len(lines), handed, gap)
	var outside []string
	for _, ps := range r.procs {
		if ps.outsideLogged > 0 {
			outside = append(outside, fmt.Sprintf("%s %d (logged %s)", ps.s.name, ps.outsideLogged, rangesString(ps.logged)))
		}
	}
	if len(outside) == 0 {
		outside = []string{"none"}
	}
	fmt.Printf("%schecks: %d IDs more than a second older than their request, %d ahead of the clock; %d outside the node pool; IDs outside the node ranges their process logged: %s\n",
		prefix, r.stale, r.ahead, r.outsidePool, strings.Join(outside, ", "))
	var starts []string
	var waits []float64
	for _, ps := range r.procs {
		s := ps.s
		s.mu.Lock()
		if s.role != "initial" && !s.readyAt.IsZero() {
			w := s.readyAt.Sub(s.launched).Seconds()
			st := fmt.Sprintf("%s %.1fs", s.name, w)
			if n := len(s.failedStarts); n > 0 {
				st += fmt.Sprintf(" (after %d failed attempts)", n)
			}
			starts = append(starts, st)
			waits = append(waits, w)
		}
		s.mu.Unlock()
	}
	failed := labelled(f.startFailures())
	switch {
	case len(starts) > 12:
		slices.Sort(waits)
		fmt.Printf("%sstart-ups, launch to ready: %d, median %.1fs, longest %.1fs; failed attempts: %s\n",
			prefix, len(waits), waits[len(waits)/2], waits[len(waits)-1], failed)
	case len(starts) > 0:
		fmt.Println(prefix + "start-ups, launch to ready: " + strings.Join(starts, ", ") + "; failed attempts: " + failed)
	}
	for _, l := range extra {
		fmt.Println(prefix + l)
	}
}

// requireProgress fails a run that proves nothing: too few IDs, or no
// replacement that issued any. It also fails on processes that exited by
// themselves or did not exit 0 on SIGTERM.
func (f *fleet) requireProgress(t *testing.T, r *report, minIDs int) {
	t.Helper()
	for _, s := range f.all() {
		s.mu.Lock()
		st, ended := s.state, s.ended
		s.mu.Unlock()
		if st == "crashed" || (st == "stopped" && ended != "exit 0 after SIGTERM") {
			t.Errorf("%s (%s): %s", s.name, s.pidString(), ended)
		}
	}
	if r.total < minIDs {
		t.Errorf("only %d IDs were received, want at least %d: the run proves too little", r.total, minIDs)
	}
	replaced := 0
	for _, ps := range r.procs {
		if ps.s.role == "replacement" && ps.n > 0 {
			replaced++
		}
	}
	if replaced == 0 {
		t.Errorf("no replacement process issued IDs")
	}
}
