package main

import (
	"bufio"
	"context"
	binenc "encoding/binary" // "binary" is the e2e tests' built command
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/randflake/randflake"
	"github.com/randflake/randflake/statedir"
)

const genUsage = `gen [-n N] [--format string|int|json|binary] [--wait D] [node and secret flags]

Prints N new IDs, one per line (json: one JSON array; binary: 8 bytes per
ID, big-endian two's complement, as GET /v1/ids answers with Accept:
application/octet-stream, never to a terminal). Without node flags
the node IDs are claimed from the state directory, as by serve. Each node
ID issues up to 131,072 IDs a second: without --claim, gen claims enough
for N IDs within about a second, at least 64 (16 from etcd) and at most
1,024 (134 million IDs a second); beyond that it waits for the next second.
Waits for node IDs (etcd, or a state directory whose history is unknown)
are reported on standard error, and so is the progress of runs longer than
a second when standard error is a terminal. SIGINT or SIGTERM releases the
node IDs and exits 1.`

// genCmd is randflake gen: new IDs on standard output.
type genCmd struct {
	n      int64
	format string
	wait   time.Duration
	gen    generatorFlags
}

func (c *genCmd) flags(fs *flag.FlagSet) {
	fs.Int64Var(&c.n, "n", 1, "number of IDs")
	fs.StringVar(&c.format, "format", "string", "output: string (base32hex), int (decimal), json (array of strings) or binary (8 bytes per ID, big-endian)")
	fs.DurationVar(&c.wait, "wait", time.Minute, "how long to wait for node IDs")
	c.gen.register(fs, statedir.BlockSize)
}

func (c *genCmd) run(e *env, args []string) error {
	if err := noArgs(args); err != nil {
		return err
	}
	if c.n < 0 {
		return usagef("-n must not be negative")
	}
	if c.format != "string" && c.format != "int" && c.format != "json" && c.format != "binary" {
		return usagef("--format must be string, int, json or binary")
	}
	if c.format == "binary" && e.isTerminal(e.stdout) {
		return usagef("refusing to write binary IDs to a terminal; redirect standard output to a file or a pipe")
	}
	if c.wait <= 0 {
		return usagef("--wait must be positive")
	}
	if c.gen.lease.claim == 0 && c.gen.lease.nodes == "" && c.gen.lease.etcd == "" {
		// From the state directory, enough blocks for -n IDs in a
		// second. From etcd, the fleet's block size: --claim or the
		// default, which the fleet's marker records.
		c.gen.lease.claim = genClaim(c.n, c.gen.lease.defaultClaim)
	}
	warnKernel(e)
	log, err := newLogger(e.stderr, "text", slog.LevelWarn)
	if err != nil {
		return err
	}
	c.gen.plain = true
	// An interrupt while the node IDs are being acquired, or while IDs
	// are printed, releases them.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	actx, cancel := context.WithTimeout(ctx, c.wait)
	defer cancel()
	g, err := c.gen.open(actx, e, log)
	switch {
	case err != nil && ctx.Err() != nil:
		return errors.New("interrupted while waiting for node IDs")
	case err != nil && actx.Err() != nil:
		return fmt.Errorf("no node IDs within --wait %v: %w", c.wait, err)
	case err != nil:
		return err
	}
	defer g.Close()
	return c.print(ctx, e, g)
}

// genMaxClaim is the most node IDs gen claims for a large -n without
// --claim: 134 million IDs a second.
const genMaxClaim = 1024

// genClaim returns the node IDs gen claims for n IDs without --claim:
// enough for all of them in one second, at least def and at most
// genMaxClaim (or def, if that is more), in blocks of the state
// directory.
func genClaim(n, def int64) int64 {
	perNode := int64(randflake.MaxSequence) + 1
	need := (n + perNode - 1) / perNode
	need = (need + statedir.BlockSize - 1) / statedir.BlockSize * statedir.BlockSize
	return max(def, min(need, genMaxClaim))
}

// progressEvery is how often gen reports its progress on a terminal;
// nothing is reported for runs shorter than that.
var progressEvery = time.Second

// progress reports the count of IDs printed on standard error.
type progress struct {
	w       io.Writer
	n       int64
	last    time.Time
	printed bool
}

// newProgress returns a progress report for n IDs, or nil if standard
// error is not a terminal.
func newProgress(e *env, n int64) *progress {
	if !e.isTerminal(e.stderr) {
		return nil
	}
	return &progress{w: e.stderr, n: n, last: time.Now()}
}

// update reports done IDs if progressEvery has passed since the last
// report (or the start).
func (p *progress) update(done int64) {
	if p == nil || time.Since(p.last) < progressEvery {
		return
	}
	p.last = time.Now()
	p.printed = true
	fmt.Fprintf(p.w, "\r%d of %d IDs (%d%%)", done, p.n, done*100/max(p.n, 1))
}

// finish ends the line of the reports, if any.
func (p *progress) finish() {
	if p != nil && p.printed {
		fmt.Fprintln(p.w)
	}
}

// print writes c.n IDs from g to standard output, waiting for the next
// second when a second's sequence numbers run out, until ctx is done.
func (c *genCmd) print(ctx context.Context, e *env, g *leased) error {
	prog := newProgress(e, c.n)
	defer prog.finish()
	w := bufio.NewWriterSize(e.stdout, 64<<10)
	if c.format == "json" {
		w.WriteByte('[')
	}
	buf := make([]int64, min(c.n, 8192))
	line := make([]byte, 0, 32)
	for done := int64(0); done < c.n; {
		if ctx.Err() != nil {
			w.Flush()
			return fmt.Errorf("interrupted after %d IDs", done)
		}
		batch := buf[:min(int64(len(buf)), c.n-done)]
		got, err := g.GenerateBatch(batch)
		for i, id := range batch[:got] {
			line = c.appendID(line[:0], id, done+int64(i) == 0)
			if _, werr := w.Write(line); werr != nil {
				return werr
			}
		}
		done += int64(got)
		prog.update(done)
		if err != nil {
			if errors.Is(err, randflake.ErrResourceExhausted) || errors.Is(err, randflake.ErrConsistencyViolation) {
				waitNextSecond(ctx) // which brings new sequence numbers
				continue
			}
			w.Flush()
			return fmt.Errorf("after %d IDs: %w", done, err)
		}
	}
	if c.format == "json" {
		w.WriteString("]\n")
	}
	return w.Flush()
}

// appendID appends id in c.format: a line, an element of the JSON array
// (first says whether it is the first) or 8 big-endian bytes.
func (c *genCmd) appendID(b []byte, id int64, first bool) []byte {
	switch c.format {
	case "int":
		return append(strconv.AppendInt(b, id, 10), '\n')
	case "json":
		if !first {
			b = append(b, ',')
		}
		return append(randflake.AppendString(append(b, '"'), id), '"')
	case "binary":
		return binenc.BigEndian.AppendUint64(b, uint64(id))
	}
	return append(randflake.AppendString(b, id), '\n')
}

// waitNextSecond sleeps until the next second of the wall clock or until
// ctx is done.
func waitNextSecond(ctx context.Context) {
	now := time.Now()
	t := time.NewTimer(now.Truncate(time.Second).Add(time.Second).Sub(now))
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
