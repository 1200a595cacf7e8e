//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package statedir

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// lockedBuffer is a bytes.Buffer safe for concurrent writes.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestNilLoggerIsSilent: without Options.Logger, NewLeased logs nothing,
// not even to slog's default logger; with one, the lease's events go to
// it. (Not parallel: it replaces the default logger.)
func TestNilLoggerIsSilent(t *testing.T) {
	var dflt lockedBuffer
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

	var given lockedBuffer
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
