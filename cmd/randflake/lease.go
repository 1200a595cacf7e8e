package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"
)

const leaseUsage = `lease status|reset-history [--node-source SOURCE] [flags]

Operations on the store of the node-ID leases: status shows it (read
only), reset-history marks its history unknown. See randflake lease
status --help and randflake lease reset-history --help.`

// leaseCmd is randflake lease: it runs one of its subcommands.
type leaseCmd struct{ noFlags }

func (c *leaseCmd) subcommands() []command {
	return []command{
		{"status", "show the fleet marker, every block's holder and record, and the clocks (read only)", leaseStatusUsage, func() subcommand { return new(leaseStatusCmd) }},
		{"reset-history", "mark every block's history unknown after an undetectable restore", leaseResetUsage, func() subcommand { return new(leaseResetCmd) }},
	}
}

func (c *leaseCmd) run(e *env, args []string) error {
	return runSubcommand(e, "lease", c.subcommands(), args, "status or reset-history", "status, reset-history")
}

const leaseResetUsage = `lease reset-history [--node-source SOURCE] [--etcd ENDPOINTS | --postgres-dsn DSN] [flags]

Marks the history of every node-ID block in the store unknown, so that the
next claims wait out the longest promise a holder can have made (rules 5
and 8 of docs/leases.md) before using any block. Holders keep their claims;
only new claims wait.

Run it after putting back a copy of the whole store that nothing can tell
from the store as it was: an etcd snapshot restored under the same cluster
ID, a PostgreSQL data directory copied back cold (same system identifier
and timeline), a whole state directory restored from a backup. Restores
that change the store's identity, and any that happen while a holder runs,
are detected without it.

Give it the source flags (and secret) of the fleet, as to serve; every flag
can also be set by the variable beside it in brackets. The static and
statefulset sources record nothing, so they have no history to reset.`

// leaseResetCmd is randflake lease reset-history.
type leaseResetCmd struct {
	gen generatorFlags
}

func (c *leaseResetCmd) flags(fs *flag.FlagSet) {
	c.gen.registerFleet(fs)
	envUsage(fs)
}

// envConfigured: every flag has a RANDFLAKE_* variable, as serve's.
func (c *leaseResetCmd) envConfigured() {}

func (c *leaseResetCmd) run(e *env, args []string) error {
	if err := noArgs(args); err != nil {
		return err
	}
	if err := c.gen.lease.check(); err != nil {
		return err
	}
	if k := c.gen.lease.kind; k == sourceStatic || k == sourceStatefulSet {
		return fmt.Errorf("the %s source records nothing: there is no history to reset", k)
	}
	ctx, o, r, done, err := storeAs[historyResetter](&c.gen, e, "reset its history")
	if err != nil {
		return err
	}
	defer done()
	if err := r.ResetHistory(ctx); err != nil {
		return o.storeError(err)
	}
	fmt.Fprintf(e.stdout, "the history of every node-ID block of %s is now unknown: the next claims wait out the longest promise\n", o.describe)
	return nil
}

// storeSource opens the source of the lease flags for an operation on its
// store (lease status, lease reset-history): within a minute, stopped by
// SIGINT or SIGTERM, warnings logged to standard error, the generator's
// secret cleared at once (only the store's records are signed with it).
// done releases what it opened.
func (g *generatorFlags) storeSource(e *env) (context.Context, *openedSource, func(), error) {
	log, err := newLogger(e.stderr, "text", slog.LevelWarn)
	if err != nil {
		return nil, nil, nil, err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	o, err := g.source(ctx, e, log)
	if err != nil {
		cancel()
		stop()
		return nil, nil, nil, err
	}
	clear(o.secret)
	return ctx, o, func() {
		if o.cleanup != nil {
			o.cleanup()
		}
		cancel()
		stop()
	}, nil
}

// storeAs is storeSource for an operation that needs the source as a T
// (historyResetter, statusReader). A source that is not one is released
// and refused with an internal error: it cannot do what cannot says.
func storeAs[T any](g *generatorFlags, e *env, cannot string) (context.Context, *openedSource, T, func(), error) {
	var none T
	ctx, o, done, err := g.storeSource(e)
	if err != nil {
		return nil, nil, none, nil, err
	}
	s, ok := o.src.(T)
	if !ok {
		done()
		return nil, nil, none, nil, fmt.Errorf("internal error: the %s source cannot %s", o.describe, cannot)
	}
	return ctx, o, s, done, nil
}

// storeError is the error of an operation on the store storeSource opened
// o for: its minute ran out, or what the source explains.
func (o *openedSource) storeError(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s did not answer within a minute: %w", o.describe, err)
	}
	return o.explain(err)
}
