// Command gen prints Randflake IDs with their decoded fields, using the
// library alone and its embedded defaults: the per-user state directory
// ($RANDFLAKE_STATE_DIR, else $XDG_STATE_HOME/randflake, else
// ~/.local/state/randflake) holds the secret and the node-ID claims of
// every process on the machine, and is made on first use. It never prints
// the secret.
//
//	go run ./examples/gen -n 5
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"time"

	"github.com/randflake/randflake"
	"github.com/randflake/randflake/statedir"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is the whole command: it returns the exit status (0, 1 when the IDs
// could not be made, 2 for a usage error).
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	n := fs.Int("n", 10, "number of IDs to print")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *n < 0 || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "gen: usage: gen [-n COUNT], COUNT not negative")
		return 2
	}
	dir, err := statedir.DefaultPath()
	if err != nil {
		fmt.Fprintln(stderr, "gen:", err)
		return 1
	}
	// The library logs nothing unless given a logger: this command shows
	// the warnings an operator should see, such as a wait for history the
	// directory cannot vouch for.
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	g, err := statedir.NewLeased(ctx, dir, statedir.Options{Logger: log})
	if err != nil {
		fmt.Fprintln(stderr, "gen:", err)
		return 1
	}
	defer g.Close(context.Background()) // records the last second used for the next process
	fmt.Fprintf(stderr, "gen: state directory %s, node IDs %d to %d, kernel %s\n",
		dir, g.Lease().FirstNode, g.Lease().LastNode, randflake.Kernel())

	ids := make([]int64, *n)
	for i := range ids {
		// A node range issues at most 131,072 IDs a second per node ID;
		// past that, GenerateContext waits for the next second.
		if ids[i], err = g.GenerateContext(ctx); err != nil {
			fmt.Fprintln(stderr, "gen:", err)
			return 1
		}
	}
	fmt.Fprintf(stdout, "%-14s %-20s %-20s %6s %6s\n", "string", "int64", "time (UTC)", "node", "seq")
	for _, id := range ids {
		ts, node, seq, err := g.Inspect(id)
		if err != nil {
			fmt.Fprintln(stderr, "gen:", err)
			return 1
		}
		fmt.Fprintf(stdout, "%-14s %-20d %-20s %6d %6d\n", randflake.EncodeString(id), id,
			time.Unix(ts, 0).UTC().Format(time.RFC3339), node, seq)
	}
	return 0
}
