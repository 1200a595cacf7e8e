package leasetest

import (
	"strings"
	"sync"
)

// LogBuffer is a log destination (an io.Writer for slog's handlers) that
// keeps what a generator's goroutines write, safe for concurrent use, for
// a test to look for a message in.
type LogBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

// Write appends p.
func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns everything written.
func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
