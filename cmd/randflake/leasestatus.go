package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/randflake/randflake"
	"github.com/randflake/randflake/lease"
	"github.com/randflake/randflake/statedir"
)

const leaseStatusUsage = `lease status [--node-source SOURCE] [--etcd ENDPOINTS | --postgres-dsn DSN] [--format text|json] [flags]

Shows the store of the node-ID leases as one read sees it, and writes
nothing: the fleet marker (its state, the fleet key ID it is signed
under, the longest promise and the second up to which history is
unknown), then every block of node IDs with its holder, the state of its
record (ok; none: never used or wiped; edited: fails its check; unknown:
valid, but the records do not match the marker), the last second its
record allows and the first second a claim made now could use it from,
and this machine's clock against the store's, where the store has one
(PostgreSQL, the Kubernetes API server).

Give it the source flags (and secret) of the fleet, as to serve; every flag
can also be set by the variable beside it in brackets. --format json
prints the same as one JSON object. The state directory must exist: status
creates none. The static and statefulset sources record nothing.`

// leaseStatusCmd is randflake lease status.
type leaseStatusCmd struct {
	gen    generatorFlags
	format string
}

func (c *leaseStatusCmd) flags(fs *flag.FlagSet) {
	c.gen.registerFleet(fs)
	fs.StringVar(&c.format, "format", "text", "output format: text (a table) or json")
	envUsage(fs)
}

// envConfigured: every flag has a RANDFLAKE_* variable, as serve's.
func (c *leaseStatusCmd) envConfigured() {}

// statusReader is a source that can describe its store.
type statusReader interface {
	Status(ctx context.Context) (lease.FleetStatus, error)
}

func (c *leaseStatusCmd) run(e *env, args []string) error {
	if err := noArgs(args); err != nil {
		return err
	}
	if c.format != "text" && c.format != "json" {
		return usagef("--format must be text or json")
	}
	if err := c.gen.lease.check(); err != nil {
		return err
	}
	switch k := c.gen.lease.kind; k {
	case sourceStatic, sourceStatefulSet:
		return fmt.Errorf("the %s source records nothing: there is no status to show", k)
	case sourceStateDir:
		if err := stateDirExists(e); err != nil {
			return err
		}
	}
	ctx, o, r, done, err := storeAs[statusReader](&c.gen, e, "describe its store")
	if err != nil {
		return err
	}
	defer done()
	st, err := r.Status(ctx)
	if err != nil {
		return o.storeError(err)
	}
	if c.format == "json" {
		return writeStatusJSON(e.stdout, st)
	}
	writeStatusText(e.stdout, st)
	return nil
}

// stateDirExists refuses a state directory that does not exist: status
// reads, and would otherwise create one (and its secret).
func stateDirExists(e *env) error {
	p := e.getenv("RANDFLAKE_STATE_DIR")
	if p == "" {
		var err error
		if p, err = statedir.DefaultPath(); err != nil {
			return err
		}
	}
	if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("no state directory at %s: nothing to show (status creates none)", p)
	} else if err != nil {
		return fmt.Errorf("the state directory %s: %w", p, err)
	}
	return nil
}

// second formats a Unix second for the status: UTC, and how far from
// now.
func second(sec int64, now time.Time) string {
	if sec <= randflake.Epoch {
		return "-"
	}
	d := time.Duration(sec-now.Unix()) * time.Second
	rel := "now"
	switch {
	case d > 0:
		rel = "in " + d.String()
	case d < 0:
		rel = (-d).String() + " ago"
	}
	return time.Unix(sec, 0).UTC().Format("2006-01-02T15:04:05Z") + " (" + rel + ")"
}

func writeStatusText(w io.Writer, st lease.FleetStatus) {
	fmt.Fprintf(w, "store:    %s (identity %q, position %d)\n", st.Store, st.Identity.ID, st.Identity.Position)
	clock := "this machine " + st.Read.UTC().Format(time.RFC3339Nano)
	if !st.StoreClock.IsZero() {
		clock += fmt.Sprintf(", the store %s (this machine %+.3fs against it)",
			st.StoreClock.UTC().Format(time.RFC3339Nano), st.Read.Sub(st.StoreClock).Seconds())
	} else {
		clock += ", the store has no clock to compare"
	}
	fmt.Fprintf(w, "clock:    %s\n", clock)
	fmt.Fprintf(w, "promise:  %v ahead; a claim on unknown history waits %v, a takeover %v (this process's configuration)\n", st.Promise, st.Wait, st.Takeover)
	m := st.Marker
	fmt.Fprintf(w, "marker:   %s", m.State)
	if m.State == "ok" {
		digest := "records match"
		if !m.DigestOK {
			digest = "records do NOT match"
		}
		fmt.Fprintf(w, ", fleet key ID %s, identity %q, horizon %ds, detection bound %ds, history unknown until %s, %s", m.FleetKeyID, m.Identity, m.Horizon, m.Detect, second(m.Unknown, st.Read), digest)
	} else if m.FleetKeyID != "" {
		fmt.Fprintf(w, ", fleet key ID %s (this process's: %s)", m.FleetKeyID, m.OwnKeyID)
	}
	fmt.Fprintln(w)
	if m.Problem != "" {
		fmt.Fprintf(w, "          %s\n", m.Problem)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODES\tHELD BY\tRECORD\tUNTIL\tFREE FROM")
	held := 0
	for i := 0; i < len(st.Blocks); i++ {
		b := st.Blocks[i]
		// A run of blocks alike (free and never used, or one claim's) is
		// one line.
		last, n := b.Last, 1
		for b.Problem == "" && i+1 < len(st.Blocks) {
			c := st.Blocks[i+1]
			if c.Held != b.Held || c.Holder != b.Holder || c.Record != b.Record || c.Until != b.Until || c.Free != b.Free || c.Problem != "" {
				break
			}
			last, n = c.Last, n+1
			i++
		}
		nodes := fmt.Sprintf("%d-%d", b.First, last)
		if n > 1 {
			nodes += fmt.Sprintf(" (%d blocks)", n)
		}
		holder := "-"
		if b.Held {
			held += n
			holder = b.Holder
			if holder == "" {
				holder = "(held)"
			}
		}
		free := "held"
		if !b.Held {
			free = "now"
			if b.Free > st.Read.Unix() {
				free = second(b.Free, st.Read)
			}
		}
		rec := b.Record
		if b.Problem != "" {
			rec += ": " + b.Problem
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", nodes, oneLine(holder), rec, second(b.Until, st.Read), free)
	}
	tw.Flush()
	fmt.Fprintf(w, "\n%d of %d blocks held\n", held, len(st.Blocks))
}

// oneLine keeps a store's text on one line of the table.
func oneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return '?'
		}
		return r
	}, s)
}

// statusJSON is the JSON form of a status.
type statusJSON struct {
	Store      string            `json:"store"`
	Identity   string            `json:"identity"`
	Position   uint64            `json:"position"`
	Read       time.Time         `json:"read"`
	StoreClock *time.Time        `json:"store_clock,omitempty"`
	ClockAhead *float64          `json:"clock_ahead_seconds,omitempty"`
	Promise    float64           `json:"promise_seconds"`
	Wait       float64           `json:"unknown_history_wait_seconds"`
	Takeover   float64           `json:"takeover_wait_seconds"`
	Marker     markerStatusJSON  `json:"marker"`
	Blocks     []blockStatusJSON `json:"blocks"`
}

type markerStatusJSON struct {
	State      string `json:"state"`
	Problem    string `json:"problem,omitempty"`
	FleetKeyID string `json:"fleet_key_id,omitempty"`
	OwnKeyID   string `json:"own_key_id"`
	Identity   string `json:"identity,omitempty"`
	Horizon    int64  `json:"horizon_seconds"`
	Detect     int64  `json:"detection_bound_seconds"`
	Unknown    int64  `json:"unknown_until"`
	DigestOK   bool   `json:"digest_ok"`
}

type blockStatusJSON struct {
	First   int64  `json:"first"`
	Last    int64  `json:"last"`
	Held    bool   `json:"held"`
	Holder  string `json:"holder,omitempty"`
	Record  string `json:"record"`
	Problem string `json:"problem,omitempty"`
	Until   int64  `json:"until,omitempty"`
	At      int64  `json:"at,omitempty"`
	Free    int64  `json:"free_from,omitempty"`
}

func writeStatusJSON(w io.Writer, st lease.FleetStatus) error {
	m := st.Marker
	out := statusJSON{Store: st.Store, Identity: st.Identity.ID, Position: st.Identity.Position, Read: st.Read.UTC(),
		Promise: st.Promise.Seconds(), Wait: st.Wait.Seconds(), Takeover: st.Takeover.Seconds(), Blocks: []blockStatusJSON{},
		Marker: markerStatusJSON{State: m.State, Problem: m.Problem, FleetKeyID: m.FleetKeyID, OwnKeyID: m.OwnKeyID,
			Identity: m.Identity, Horizon: m.Horizon, Detect: m.Detect, Unknown: m.Unknown, DigestOK: m.DigestOK}}
	if !st.StoreClock.IsZero() {
		sc := st.StoreClock.UTC()
		ahead := st.Read.Sub(st.StoreClock).Seconds()
		out.StoreClock, out.ClockAhead = &sc, &ahead
	}
	for _, b := range st.Blocks {
		out.Blocks = append(out.Blocks, blockStatusJSON{First: b.First, Last: b.Last, Held: b.Held, Holder: b.Holder,
			Record: b.Record, Problem: b.Problem, Until: b.Until, At: b.At, Free: b.Free})
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
