package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/randflake/randflake"
	"github.com/randflake/randflake/statedir"
)

func runGen(e *env, args []string) error {
	// Signals count from the start: an interrupt while the node IDs are
	// being acquired, or while IDs are printed, releases them.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fs := newFlags(e, "gen", "gen [-n N] [--format string|int|json] [--wait D] [node and secret flags]\n\nPrints N new IDs, one per line (json: one JSON array). Without node flags\nthe node IDs are claimed from the state directory, as by serve. Waits for\nnode IDs (etcd, or a state directory whose history is unknown) are reported\non standard error. SIGINT or SIGTERM releases the node IDs and exits 1.")
	n := fs.Int64("n", 1, "number of IDs")
	format := fs.String("format", "string", "output: string (base32hex), int (decimal) or json (array of strings)")
	waitFor := fs.Duration("wait", time.Minute, "how long to wait for node IDs")
	var sf secretFlags
	sf.register(fs)
	var lf leaseFlags
	lf.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	if *n < 0 {
		return usagef("-n must not be negative")
	}
	if *format != "string" && *format != "int" && *format != "json" {
		return usagef("--format must be string, int or json")
	}
	if *waitFor <= 0 {
		return usagef("--wait must be positive")
	}
	log, err := newLogger(e.stderr, "text", slog.LevelWarn)
	if err != nil {
		return err
	}
	actx, cancel := context.WithTimeout(ctx, *waitFor)
	defer cancel()
	g, err := openGenerator(actx, e, log, &sf, &lf, statedir.BlockSize)
	switch {
	case err != nil && ctx.Err() != nil:
		return errors.New("interrupted while waiting for node IDs")
	case err != nil && actx.Err() != nil:
		return fmt.Errorf("no node IDs within --wait %v: %w", *waitFor, err)
	case err != nil:
		return err
	}
	defer g.Close()

	w := bufio.NewWriterSize(e.stdout, 64<<10)
	if *format == "json" {
		w.WriteByte('[')
	}
	buf := make([]int64, min(*n, 8192))
	line := make([]byte, 0, 32)
	for done := int64(0); done < *n; {
		if ctx.Err() != nil {
			w.Flush()
			return fmt.Errorf("interrupted after %d IDs", done)
		}
		batch := buf[:min(int64(len(buf)), *n-done)]
		got, err := g.GenerateBatch(batch)
		for i, id := range batch[:got] {
			line = line[:0]
			switch *format {
			case "string":
				line = randflake.AppendString(line, id)
				line = append(line, '\n')
			case "int":
				line = strconv.AppendInt(line, id, 10)
				line = append(line, '\n')
			case "json":
				if done+int64(i) > 0 {
					line = append(line, ',')
				}
				line = append(line, '"')
				line = randflake.AppendString(line, id)
				line = append(line, '"')
			}
			if _, werr := w.Write(line); werr != nil {
				return werr
			}
		}
		done += int64(got)
		if err != nil {
			if errors.Is(err, randflake.ErrResourceExhausted) || errors.Is(err, randflake.ErrConsistencyViolation) {
				g.wait(ctx) // the next second brings new sequence numbers
				continue
			}
			w.Flush()
			return fmt.Errorf("after %d IDs: %w", done, err)
		}
	}
	if *format == "json" {
		w.WriteString("]\n")
	}
	return w.Flush()
}
