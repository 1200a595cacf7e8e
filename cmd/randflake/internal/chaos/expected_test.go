//go:build chaos

package chaos

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// window is a stretch of time in which an event explains some client
// errors: a server killed (its requests in flight fail), stopped or cut
// off, etcd without a quorum, or the fleet waiting out unknown history
// after a wipe or a restore (503 lease until the horizon has passed).
type window struct {
	s           *server // nil: every server
	from, until time.Time
	why         string   // the event, as the summary names it
	kinds       []string // the failure kinds it explains; nil: any
	// limit, if set, lets the window of one server last past until while
	// that server issues nothing (expectUntilIssuing), up to limit.
	limit time.Time
}

// lease503 is the answer of a server without a valid lease.
const lease503 = "503 lease"

// expect records that s's clients (every server's, if s is nil) may fail
// between from and until because of the event why, with one of kinds (any
// kind if none is given).
func (f *fleet) expect(s *server, from, until time.Time, why string, kinds ...string) {
	f.mu.Lock()
	f.windows = append(f.windows, window{s: s, from: from, until: until, why: why, kinds: kinds})
	f.mu.Unlock()
}

// expectUntilIssuing is expect for s alone, with a window that goes on
// past until for as long as s issues nothing: a server that lost its claim
// to the event claims again, and on a loaded machine that claim (its
// retries, its takeover wait, another event meanwhile, such as etcd
// losing its quorum) can outlast until. The window then ends when s's
// clients next get IDs after its first failure in it, and at limit at the
// latest.
func (f *fleet) expectUntilIssuing(s *server, from, until, limit time.Time, why string, kinds ...string) {
	f.mu.Lock()
	f.windows = append(f.windows, window{s: s, from: from, until: until, why: why, kinds: kinds, limit: limit})
	f.mu.Unlock()
}

// end returns when w ends for s, whose failures are fs and successful
// fetches batches.
func (w window) end(fs []failure, batches []batch) int64 {
	until := w.until.UnixNano()
	if w.limit.IsZero() {
		return until
	}
	first := int64(-1)
	for _, fl := range fs {
		if fl.at >= w.from.UnixNano() && (w.kinds == nil || slices.Contains(w.kinds, fl.kind)) {
			first = fl.at
			break
		}
	}
	if first < 0 {
		return until
	}
	end := w.limit.UnixNano()
	for _, b := range batches {
		if b.recv > first {
			end = min(end, b.recv)
			break
		}
	}
	return max(until, end)
}

// clientErrors sorts the clients' failures: those an event explains, by
// event and kind, and the others, by kind.
func (f *fleet) clientErrors() (expected map[string]map[string]int, unexpected map[string]int) {
	expected, unexpected = map[string]map[string]int{}, map[string]int{}
	f.eachFailure(func(s *server, fl failure, why string) {
		if why == "" {
			unexpected[fl.kind]++
			return
		}
		if expected[why] == nil {
			expected[why] = map[string]int{}
		}
		expected[why][fl.kind]++
	})
	return expected, unexpected
}

// eachFailure calls fn with every client failure of every server and the
// event that explains it ("" if none does).
func (f *fleet) eachFailure(fn func(s *server, fl failure, why string)) {
	f.mu.Lock()
	ws := slices.Clone(f.windows)
	f.mu.Unlock()
	for _, s := range f.all() {
		s.coll.mu.Lock()
		fs := slices.Clone(s.coll.failures)
		batches := slices.Clone(s.coll.batches)
		s.coll.mu.Unlock()
		ends := make([]int64, len(ws))
		for i, w := range ws {
			ends[i] = w.end(fs, batches)
		}
		for _, fl := range fs {
			why := ""
			for i, w := range ws {
				if (w.s == nil || w.s == s) && fl.at >= w.from.UnixNano() && fl.at <= ends[i] &&
					(w.kinds == nil || slices.Contains(w.kinds, fl.kind)) {
					why = w.why
					break
				}
			}
			fn(s, fl, why)
		}
	}
}

// unexpectedSpans says, per server and kind, when the unexpected client
// failures came, in seconds since the start: "s4 503 lease×124
// 103.2s-105.0s".
func (f *fleet) unexpectedSpans() []string {
	type span struct {
		n        int
		from, to int64
	}
	var keys []string
	spans := map[string]*span{}
	f.eachFailure(func(s *server, fl failure, why string) {
		if why != "" {
			return
		}
		k := s.name + " " + fl.kind
		sp := spans[k]
		if sp == nil {
			sp = &span{from: fl.at, to: fl.at}
			spans[k] = sp
			keys = append(keys, k)
		}
		sp.n++
		sp.from, sp.to = min(sp.from, fl.at), max(sp.to, fl.at)
	})
	var lines []string
	for _, k := range keys {
		sp := spans[k]
		lines = append(lines, fmt.Sprintf("%s×%d %.1fs-%.1fs", k, sp.n,
			time.Unix(0, sp.from).Sub(f.start).Seconds(), time.Unix(0, sp.to).Sub(f.start).Seconds()))
	}
	return lines
}

// unexplainedBetween counts the client failures of kind, of every server,
// between from and until, that no event's window explains.
func (f *fleet) unexplainedBetween(from, until time.Time, kind string) int {
	n := 0
	f.eachFailure(func(_ *server, fl failure, why string) {
		if why == "" && fl.kind == kind && fl.at >= from.UnixNano() && fl.at <= until.UnixNano() {
			n++
		}
	})
	return n
}

// errorLine describes the clients' failures, each count labelled
// expected (with the event that explains it) or unexpected: "client
// errors: 1234 expected (wipe: 503 lease×900; SIGKILL: refused×3),
// unexpected: none".
func (f *fleet) errorLine() string {
	expected, unexpected := f.clientErrors()
	return "client errors: " + labelled(expected, unexpected)
}

// failedStart is a start attempt that did not become ready, and why.
type failedStart struct {
	at  time.Time
	why string // as startFailure and waitReady say
}

// Why start failures are expected, by their kind: the test's own doing,
// or the fleet's state that the attempt waits out by retrying.
var expectedStartFailures = map[string]string{
	"killed during start-up": "SIGKILL during start-up, by the test",
	"stopping":               "the run's end",
	"no free node IDs":       "every block held, until a killed holder's lease ends",
}

// startFailures sorts the failed start attempts as clientErrors sorts the
// clients' failures: those the test caused or an event explains (any
// kind, within the event's window), by why and kind, and the others.
func (f *fleet) startFailures() (expected map[string]map[string]int, unexpected map[string]int) {
	f.mu.Lock()
	ws := slices.Clone(f.windows)
	f.mu.Unlock()
	expected, unexpected = map[string]map[string]int{}, map[string]int{}
	for _, s := range f.all() {
		s.mu.Lock()
		fs := slices.Clone(s.failedStarts)
		s.mu.Unlock()
		for _, fl := range fs {
			why := expectedStartFailures[fl.why]
			for _, w := range ws {
				if why != "" {
					break
				}
				if (w.s == nil || w.s == s) && !fl.at.Before(w.from) && !fl.at.After(w.until) {
					why = w.why
				}
			}
			if why == "" {
				unexpected[fl.why]++
				continue
			}
			if expected[why] == nil {
				expected[why] = map[string]int{}
			}
			expected[why][fl.why]++
		}
	}
	return expected, unexpected
}

// labelled formats failure counts, each labelled expected (grouped by
// why) or unexpected: "12 expected (SIGKILL: refused×12), unexpected:
// none".
func labelled(expected map[string]map[string]int, unexpected map[string]int) string {
	n := 0
	var whys []string
	for why, m := range expected {
		whys = append(whys, why)
		for _, v := range m {
			n += v
		}
	}
	sort.Strings(whys)
	var parts []string
	for _, why := range whys {
		parts = append(parts, why+": "+countsString(expected[why]))
	}
	exp := "none expected"
	if n > 0 {
		exp = fmt.Sprintf("%d expected (%s)", n, strings.Join(parts, "; "))
	}
	return fmt.Sprintf("%s, unexpected: %s", exp, countsString(unexpected))
}
