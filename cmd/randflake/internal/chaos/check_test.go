//go:build chaos

package chaos

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/randflake/randflake"
)

// bound says that the responses of server s (nil: of every server)
// received in [from, until) carry no second after max (if max > 0): what a
// lease source promises about a process cut off from it; and no second
// before min (if min > 0): what unknown history costs a claim made after
// a wipe or a rollback.
type bound struct {
	s           *server
	from, until time.Time
	min, max    int64
	what        string
}

// violates reports whether an ID of second sec violates the bound.
func (bd bound) violates(sec int64) bool {
	return (bd.max > 0 && sec > bd.max) || (bd.min > 0 && sec < bd.min)
}

type checkConfig struct {
	secret    []byte
	rangeSize int64 // node IDs per claim
	// strict: every ID lies in a node range its process logged.
	strict bool
	// poolNodes > 0: every node ID is below it.
	poolNodes int64
	bounds    []bound
	start     time.Time // seconds are shown relative to it
}

// tenure is the use of one node range by one process: the runs of
// seconds in which it issued IDs on it, a new run after a second or more
// without any (the process lost the range and claimed it again later).
type tenure struct {
	runs []secondRun
	n    int
}

type secondRun struct{ first, last int64 }

// add counts an ID of second sec. IDs arrive about in the order of their
// seconds (batches of several clients interleave): a second within the
// last run, or just after it, extends it.
func (tn *tenure) add(sec int64) {
	tn.n++
	for i := len(tn.runs) - 1; i >= 0; i-- {
		r := &tn.runs[i]
		if sec >= r.first-1 && sec <= r.last+1 {
			r.first, r.last = min(r.first, sec), max(r.last, sec)
			return
		}
	}
	tn.runs = append(tn.runs, secondRun{sec, sec})
}

type procStats struct {
	s             *server
	n             int
	ranges        map[int64]*tenure
	logged        [][2]int64
	outsideLogged int
}

type report struct {
	total, dups    int
	dupExamples    []string
	shared         int // (second, node) pairs issued by more than one process
	sharedExamples []string
	stale, ahead   int
	timeExamples   []string
	bounds         []string // violated bounds, with counts and examples
	outsidePool    int
	poolExamples   []string
	procs          []*procStats
	errors         []string // what fails the test
}

const seqBits = randflake.RANDFLAKE_SEQUENCE_BITS

func split(raw uint64) (sec, node, seq int64) {
	sec = int64(raw>>(randflake.RANDFLAKE_NODE_BITS+seqBits)) + randflake.Epoch
	node = int64(raw>>seqBits) & randflake.MaxNode
	seq = int64(raw) & randflake.MaxSequence
	return sec, node, seq
}

var rangeRE = regexp.MustCompile(`(?:node IDs |nodes=)(\d+)-(\d+)`)

// loggedRanges returns the node ranges the ready attempt of s logged.
func loggedRanges(s *server) [][2]int64 {
	p := s.proc()
	if p == nil {
		return nil
	}
	text := p.logText()
	if i := strings.LastIndex(text, "=== attempt "); i >= 0 {
		text = text[i:]
	}
	var rs [][2]int64
	for _, m := range rangeRE.FindAllStringSubmatch(text, -1) {
		a, _ := strconv.ParseInt(m[1], 10, 64)
		b, _ := strconv.ParseInt(m[2], 10, 64)
		if !slices.Contains(rs, [2]int64{a, b}) {
			rs = append(rs, [2]int64{a, b})
		}
	}
	return rs
}

// analyze decrypts and checks every ID the servers' clients received.
func analyze(servers []*server, cfg checkConfig) *report {
	c, err := randflake.NewSparx64(cfg.secret)
	if err != nil {
		return &report{errors: []string{"secret: " + err.Error()}}
	}
	r := &report{}
	rel := func(sec int64) string { return fmt.Sprintf("%ds", sec-cfg.start.Unix()) }
	fields := func(raw uint64) string {
		sec, node, seq := split(raw)
		return fmt.Sprintf("%s (second %s, node %d, sequence %d)", randflake.EncodeString(int64(c.EncryptID(raw))), rel(sec), node, seq)
	}
	boundHits := make([]int, len(cfg.bounds))
	boundExamples := make([]string, len(cfg.bounds))
	raws := make([][]uint64, len(servers))
	for i, s := range servers {
		s.coll.mu.Lock()
		ids, batches := s.coll.ids, s.coll.batches
		s.coll.mu.Unlock()
		ps := &procStats{s: s, n: len(ids), ranges: map[int64]*tenure{}, logged: loggedRanges(s)}
		r.procs = append(r.procs, ps)
		r.total += len(ids)
		rw := make([]uint64, len(ids))
		c.DecryptIDs(rw, ids)
		raws[i] = rw
		start := 0
		for _, b := range batches {
			sendSec, recvSec := b.send/1e9, b.recv/1e9
			for _, raw := range rw[start:b.end] {
				sec, node, _ := split(raw)
				if sec < sendSec-1 || sec > recvSec {
					if sec < sendSec-1 {
						r.stale++
					} else {
						r.ahead++
					}
					if len(r.timeExamples) < 5 {
						ex := fmt.Sprintf("%s from %s: requested at %.1fs, received at %.1fs",
							fields(raw), s.name, time.Duration(b.send-cfg.start.UnixNano()).Seconds(), time.Duration(b.recv-cfg.start.UnixNano()).Seconds())
						if e := s.episodeAt(b.recv); e != "" {
							ex += " (" + s.name + ": " + e + ")"
						}
						r.timeExamples = append(r.timeExamples, ex)
					}
				}
				for j, bd := range cfg.bounds {
					if (bd.s == nil || bd.s == s) && b.recv >= bd.from.UnixNano() && b.recv < bd.until.UnixNano() && bd.violates(sec) {
						boundHits[j]++
						if boundExamples[j] == "" {
							boundExamples[j] = fmt.Sprintf("%s from %s, received at %.1fs",
								fields(raw), s.name, time.Duration(b.recv-cfg.start.UnixNano()).Seconds())
						}
					}
				}
				rs := node / cfg.rangeSize * cfg.rangeSize
				tn := ps.ranges[rs]
				if tn == nil {
					tn = &tenure{}
					ps.ranges[rs] = tn
				}
				tn.add(sec)
				if cfg.poolNodes > 0 && node >= cfg.poolNodes {
					r.outsidePool++
					if len(r.poolExamples) < 3 {
						r.poolExamples = append(r.poolExamples, fields(raw)+" from "+s.name)
					}
				}
				if len(ps.logged) > 0 && !slices.ContainsFunc(ps.logged, func(l [2]int64) bool { return node >= l[0] && node <= l[1] }) {
					ps.outsideLogged++
				}
			}
			start = b.end
		}
		slices.Sort(rw)
	}

	// (second, node) pairs: which process issued each first; pairs seen in
	// two processes are shared.
	owner := map[uint64]int{}
	sharedBy := map[uint64][]int{}
	for i, rw := range raws {
		prev := ^uint64(0)
		for _, raw := range rw {
			k := raw >> seqBits
			if k == prev {
				continue
			}
			prev = k
			if o, ok := owner[k]; ok {
				if len(sharedBy[k]) == 0 {
					sharedBy[k] = []int{o}
				}
				sharedBy[k] = append(sharedBy[k], i)
			} else {
				owner[k] = i
			}
		}
	}
	keys := make([]uint64, 0, len(sharedBy))
	for k := range sharedBy {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	r.shared = len(keys)
	// prefix returns the IDs of rw on the (second, node) pair k.
	prefix := func(rw []uint64, k uint64) []uint64 {
		lo, _ := slices.BinarySearch(rw, k<<seqBits)
		hi, _ := slices.BinarySearch(rw, (k+1)<<seqBits)
		return rw[lo:hi]
	}
	for _, k := range keys {
		var names []string
		var all []uint64
		holders := map[uint64][]string{}
		for _, i := range sharedBy[k] {
			ids := prefix(raws[i], k)
			names = append(names, fmt.Sprintf("%s (%d IDs)", servers[i].name, len(ids)))
			all = append(all, ids...)
			for _, raw := range ids {
				holders[raw] = append(holders[raw], servers[i].name)
			}
		}
		slices.Sort(all)
		for j := 1; j < len(all); j++ {
			if all[j] == all[j-1] {
				r.dups++
				if len(r.dupExamples) < 5 {
					r.dupExamples = append(r.dupExamples, fields(all[j])+" from "+strings.Join(holders[all[j]], " and "))
				}
			}
		}
		if len(r.sharedExamples) < 5 {
			sec, node, _ := split(k << seqBits)
			r.sharedExamples = append(r.sharedExamples, fmt.Sprintf("second %s (%s), node %d: %s",
				rel(sec), time.Unix(sec, 0).UTC().Format(time.RFC3339), node, strings.Join(names, ", ")))
		}
	}
	// Duplicates within one process, on pairs nobody else issued.
	for i, rw := range raws {
		for j := 1; j < len(rw); j++ {
			if rw[j] == rw[j-1] && len(sharedBy[rw[j]>>seqBits]) == 0 {
				r.dups++
				if len(r.dupExamples) < 5 {
					r.dupExamples = append(r.dupExamples, fields(rw[j])+" twice from "+servers[i].name)
				}
			}
		}
	}

	for j, bd := range cfg.bounds {
		if boundHits[j] == 0 {
			continue
		}
		var want []string
		if bd.min > 0 {
			want = append(want, "none before second "+rel(bd.min))
		}
		if bd.max > 0 {
			want = append(want, "none after second "+rel(bd.max))
		}
		r.bounds = append(r.bounds, fmt.Sprintf("%s: %d IDs outside the bound (%s), e.g. %s", bd.what, boundHits[j], strings.Join(want, ", "), boundExamples[j]))
	}
	if r.dups > 0 {
		r.errors = append(r.errors, fmt.Sprintf("%d duplicate IDs, e.g.\n  %s", r.dups, strings.Join(r.dupExamples, "\n  ")))
	}
	if r.shared > 0 {
		r.errors = append(r.errors, fmt.Sprintf("%d (second, node) pairs issued by two processes, e.g.\n  %s", r.shared, strings.Join(r.sharedExamples, "\n  ")))
	}
	if r.stale+r.ahead > 0 {
		r.errors = append(r.errors, fmt.Sprintf("%d IDs carry a second more than one second before their request was sent (none may be handed out more than a second behind the clock), %d a second after their response arrived; e.g.\n  %s",
			r.stale, r.ahead, strings.Join(r.timeExamples, "\n  ")))
	}
	for _, b := range r.bounds {
		r.errors = append(r.errors, "time bound violated: "+b)
	}
	if r.outsidePool > 0 {
		r.errors = append(r.errors, fmt.Sprintf("%d IDs on node IDs outside the free pool 0-%d, e.g.\n  %s", r.outsidePool, cfg.poolNodes-1, strings.Join(r.poolExamples, "\n  ")))
	}
	for _, ps := range r.procs {
		if cfg.strict && ps.outsideLogged > 0 {
			r.errors = append(r.errors, fmt.Sprintf("%s: %d IDs outside the node ranges it logged (%s)", ps.s.name, ps.outsideLogged, rangesString(ps.logged)))
		}
	}
	return r
}

func rangesString(rs [][2]int64) string {
	var parts []string
	for _, r := range rs {
		parts = append(parts, fmt.Sprintf("%d-%d", r[0], r[1]))
	}
	if len(parts) == 0 {
		return "none logged"
	}
	return strings.Join(parts, ", ")
}

// handovers describes, per node range, its holders in the order they
// used it, with the seconds between one holder's last ID and the next's
// first: "0-15: s1 0s-19s, r1 27s-60s (7s later)" (a holder that used the
// range again after a break appears again). It also returns how many
// ranges changed hands and the shortest gap between two holders.
func (r *report) handovers(rangeSize int64, start time.Time) (lines []string, handed int, minGap int64) {
	type use struct {
		name string
		run  secondRun
	}
	byRange := map[int64][]use{}
	for _, ps := range r.procs {
		for rs, t := range ps.ranges {
			for _, run := range t.runs {
				byRange[rs] = append(byRange[rs], use{ps.s.name, run})
			}
		}
	}
	starts := make([]int64, 0, len(byRange))
	for rs := range byRange {
		starts = append(starts, rs)
	}
	slices.Sort(starts)
	minGap = -1
	for _, rs := range starts {
		us := byRange[rs]
		sort.Slice(us, func(i, j int) bool { return us[i].run.first < us[j].run.first })
		var parts []string
		holders := map[string]bool{}
		for i, u := range us {
			holders[u.name] = true
			p := fmt.Sprintf("%s %ds-%ds", u.name, u.run.first-start.Unix(), u.run.last-start.Unix())
			if i > 0 {
				gap := u.run.first - us[i-1].run.last - 1
				switch {
				case gap < 0:
					p += fmt.Sprintf(" (seconds overlapping %s's by %ds)", us[i-1].name, -gap)
				case u.name == us[i-1].name:
					p += fmt.Sprintf(" (again, %ds later)", gap)
				default:
					p += fmt.Sprintf(" (%ds later)", gap)
				}
				if u.name != us[i-1].name && (minGap < 0 || gap < minGap) {
					minGap = gap
				}
			}
			parts = append(parts, p)
		}
		if len(holders) > 1 {
			handed++
		}
		lines = append(lines, fmt.Sprintf("%d-%d: %s", rs, rs+rangeSize-1, strings.Join(parts, ", ")))
	}
	return lines, handed, minGap
}
