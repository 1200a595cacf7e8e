//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package statedir

import (
	"context"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/randflake/randflake/leasetest"
)

// TestNilLoggerIsSilent: without Options.Logger, NewLeased logs nothing,
// not even to slog's default logger; with one, the lease's events go to
// it. (Not parallel: it replaces the default logger.)
func TestNilLoggerIsSilent(t *testing.T) {
	var dflt leasetest.LogBuffer
	saved := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&dflt, &slog.HandlerOptions{Level: slog.LevelDebug})))
	defer slog.SetDefault(saved)
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state")

	g, err := NewLeased(ctx, path, Options{Nodes: 64})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Generate(); err != nil {
		t.Fatal(err)
	}
	if err := g.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if out := dflt.String(); out != "" {
		t.Errorf("NewLeased without a logger logged to the default logger:\n%s", out)
	}

	var given leasetest.LogBuffer
	g, err = NewLeased(ctx, path, Options{Nodes: 64, Logger: slog.New(slog.NewTextHandler(&given, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if out := given.String(); !strings.Contains(out, "lease acquired") || !strings.Contains(out, "lease released") {
		t.Errorf("the given logger has no acquisition and release:\n%s", out)
	}
	if out := dflt.String(); out != "" {
		t.Errorf("NewLeased with a logger also logged to the default logger:\n%s", out)
	}
}

// TestOutsideSecretSaysWhy: a process on a secret from outside the
// directory, on a directory used before with its own secret or on a new
// one, logs why its first claim waits (the history was recorded for the
// directory's own secret, or the directory is new), not only the engine's
// "no fleet marker".
func TestOutsideSecretSaysWhy(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, want string
		usedBefore bool
	}{
		{"used before", outsideSecretUsed, true},
		{"new directory", outsideSecretNew, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "state")
			if c.usedBefore {
				own, _ := reopen(t, path, t0, Options{Nodes: 64, LastNode: 1023})
				l, _ := acquire(t, own)
				if err := own.Release(context.Background(), l, l.Start-1); err != nil {
					t.Fatal(err)
				}
			}
			var logged leasetest.LogBuffer
			ext, _ := reopen(t, path, t0, Options{Nodes: 64, LastNode: 1023, ExternalSecret: true,
				Logger: slog.New(slog.NewTextHandler(&logged, nil))})
			// The first claim waits about 11 s: it is stopped once the
			// engine has logged the wait, which it does after the reason.
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				_, err := ext.Acquire(ctx)
				done <- err
			}()
			for start := time.Now(); !strings.Contains(logged.String(), "no fleet marker") && time.Since(start) < 30*time.Second; {
				time.Sleep(10 * time.Millisecond)
			}
			cancel()
			if err := <-done; err == nil {
				t.Fatal("the outside secret's first claim came at once")
			}
			out := logged.String()
			if !strings.Contains(out, "no fleet marker") {
				t.Errorf("the engine logged no wait:\n%s", out)
			}
			if !strings.Contains(out, strconv.Quote(c.want)) {
				t.Errorf("log without the reason %q:\n%s", c.want, out)
			}
			other := outsideSecretNew
			if !c.usedBefore {
				other = outsideSecretUsed
			}
			if strings.Contains(out, strconv.Quote(other)) {
				t.Errorf("log with the other case's reason:\n%s", out)
			}
		})
	}
}
