package main

import (
	"bytes"
	"io"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/randflake/randflake"
)

// synthInput is an io.Reader that makes its input as it is read, so that
// the test itself holds none of it: n IDs as words (or, with json, as one
// JSON array of strings and numbers), or one word of n bytes (long).
// Every 16,384 items it records the live heap; peak is the most seen.
type synthInput struct {
	n, i     int
	json     bool
	long     bool
	pending  []byte
	peak     uint64
	finished bool
}

func (s *synthInput) Read(p []byte) (int, error) {
	for len(s.pending) < len(p) && !s.finished {
		s.fill()
	}
	if len(s.pending) == 0 {
		return 0, io.EOF
	}
	n := copy(p, s.pending)
	s.pending = s.pending[n:]
	if len(s.pending) == 0 {
		s.pending = s.pending[:0:0]
	}
	return n, nil
}

// fill appends the next items to pending.
func (s *synthInput) fill() {
	if s.i%16384 == 0 {
		sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
		metrics.Read(sample)
		s.peak = max(s.peak, sample[0].Value.Uint64())
	}
	buf := s.pending
	switch {
	case s.i >= s.n:
		if s.json && !s.long {
			buf = append(buf, "]\n"...)
		}
		s.finished = true
	case s.long:
		if s.i == 0 && s.json {
			buf = append(buf, `["`...)
		}
		chunk := min(s.n-s.i, 4096)
		buf = append(buf, strings.Repeat("z", chunk)...)
		s.i += chunk
		if s.i >= s.n && s.json {
			buf = append(buf, `"]`...)
		}
		s.pending = buf
		return
	case s.json:
		if s.i == 0 {
			buf = append(buf, '[')
		} else {
			buf = append(buf, ',')
		}
		id := int64(s.i)*7919 + 1
		if s.i%2 == 0 {
			buf = append(randflake.AppendString(append(buf, '"'), id), '"')
		} else {
			buf = strconv.AppendInt(buf, id, 10) // a decimal ID
		}
	default:
		buf = append(randflake.AppendString(buf, int64(s.i)*7919+1), '\n')
	}
	s.i++
	s.pending = buf
}

// countingWriter counts lines and bytes and keeps nothing.
type countingWriter struct{ lines, bytes int }

func (w *countingWriter) Write(p []byte) (int, error) {
	w.lines += bytes.Count(p, []byte{'\n'})
	w.bytes += len(p)
	return len(p), nil
}

// inspect and uniqueid parse stream their input: over millions of IDs
// (as words and as one JSON array) and over single words and JSON strings
// of 64 MB, the live heap stays under 16 MB, where keeping the input (as
// inspect once did) keeps more than 40 MB live for a million IDs. The
// input itself reads the live heap (runtime/metrics /gc/heap/live:bytes:
// what the last collection kept) every 16,384 items. Unlike the heap in
// use, it does not depend on when the collector runs, so the check cannot
// fail by timing; and input kept in memory makes the heap grow, which
// makes the collector run and the kept input show as live.
func TestInspectStreamsInBoundedMemory(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	const bound = 16 << 20
	ids := 2_000_000
	if testing.Short() || raceEnabled {
		ids = 1_000_000
	}
	for _, c := range []struct {
		name      string
		args      []string
		in        *synthInput
		wantLines int
		wantExit  int
	}{
		{"inspect words", []string{"inspect"}, &synthInput{n: ids}, ids, 0},
		{"inspect JSON array", []string{"inspect", "--json"}, &synthInput{n: ids, json: true}, ids, 0},
		{"inspect one 64 MB word", []string{"inspect"}, &synthInput{n: 64 << 20, long: true}, 0, 1},
		{"inspect one 64 MB JSON string", []string{"inspect"}, &synthInput{n: 64 << 20, long: true, json: true}, 0, 1},
		{"uniqueid parse one 64 MB word", []string{"uniqueid", "parse"}, &synthInput{n: 64 << 20, long: true}, 0, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			runtime.GC()
			var stdout countingWriter
			var stderr bytes.Buffer
			e := &env{
				stdin: c.in, stdout: &stdout, stderr: &stderr,
				getenv:     func(k string) string { return goldenEnv[k] },
				isTerminal: func(any) bool { return false },
				now:        func() time.Time { return goldenClock },
			}
			start := time.Now()
			code := run(e, c.args)
			if code != c.wantExit || stdout.lines != c.wantLines {
				t.Fatalf("exit status %d and %d lines, want %d and %d; stderr:\n%.2000s", code, stdout.lines, c.wantExit, c.wantLines, stderr.String())
			}
			if stderr.Len() > 2000 {
				t.Errorf("%d bytes on standard error, want a short message: %.500s", stderr.Len(), stderr.String())
			}
			if c.in.peak == 0 || c.in.peak > bound {
				t.Errorf("live heap peaked at %.1f MB, want at most %d MB", float64(c.in.peak)/(1<<20), bound>>20)
			}
			t.Logf("%d items, %d bytes out, live heap at most %.1f MB, %v", c.in.i, stdout.bytes, float64(c.in.peak)/(1<<20), time.Since(start).Round(time.Millisecond))
		})
	}
}
