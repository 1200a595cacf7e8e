package loadclient

import (
	"context"
	binenc "encoding/binary"
	"strings"
	"testing"
	"time"

	"github.com/randflake/randflake"
)

// The duplicate window finds what its documentation promises: a duplicate
// within one batch, and between IDs fewer than the window apart across
// table swaps; equal IDs more than two windows apart are forgotten.
func TestDupWindow(t *testing.T) {
	const window = 1000
	w := newDupWindow(window)
	seq := func(from, n int) []int64 {
		ids := make([]int64, n)
		for i := range ids {
			ids[i] = int64(from + i)
		}
		return ids
	}
	if _, dup := w.add(seq(1, 2500)); dup {
		t.Fatal("distinct IDs reported as a duplicate")
	}
	// 2500 added: 500 in the current table, 1000 (1001..2000) before.
	for _, id := range []int64{2500, 2000, 1600, 1501} {
		if got, dup := w.add([]int64{id}); !dup || got != id {
			t.Errorf("ID %d, fewer than %d IDs back: not found", id, window)
		}
	}
	if _, dup := w.add([]int64{5}); dup {
		t.Error("ID 5, more than two windows back, was still remembered")
	}
	if got, dup := newDupWindow(window).add([]int64{7, 8, 0, 7}); !dup || got != 7 {
		t.Errorf("duplicate within one batch: %d, %v", got, dup)
	}
	if got, dup := newDupWindow(window).add([]int64{0, 1, 0}); !dup || got != 0 {
		t.Errorf("duplicate ID 0: %d, %v", got, dup)
	}
}

// The latency histogram's percentiles are within 1% of the exact ones,
// and its maximum is exact.
func TestLatencyHistogram(t *testing.T) {
	var h histogram
	var all []time.Duration
	for i := 1; i <= 100000; i++ {
		d := time.Duration(i*i) * 13 // 13 ns to 130 s
		h.add(d)
		all = append(all, d)
	}
	for _, p := range []float64{0, 1, 50, 90, 99, 99.9} {
		want := all[int(p/100*float64(len(all)-1))]
		got := h.percentile(p)
		if diff := float64(got-want) / float64(want); diff > 0.01 || diff < -0.01 {
			t.Errorf("p%v: %v, exact %v", p, got, want)
		}
	}
	if got := h.percentile(100); got != all[len(all)-1] {
		t.Errorf("max %v, want %v", got, all[len(all)-1])
	}
	for _, d := range []time.Duration{0, 1, 127, 128, 255, 256, 1 << 20, 1<<40 + 12345} {
		if v := bucketValue(bucket(d)); d >= 128 && (float64(v-d)/float64(d) > 1.0/128 || float64(d-v)/float64(d) > 1.0/128) || d < 128 && v != d {
			t.Errorf("%d ns falls in a bucket of %d ns", d, v)
		}
	}
}

// The verifying sink reads every format however the body is split, and
// fails on what is not an answer of IDs, and on a duplicate.
func TestIDSink(t *testing.T) {
	ids := []int64{1, 1 << 40, -5, 548540665548167133}
	var bin, text, js []byte
	js = append(js, `{"ids":[`...)
	for i, id := range ids {
		bin = binenc.BigEndian.AppendUint64(bin, uint64(id))
		text = append(randflake.AppendString(text, id), '\n')
		if i > 0 {
			js = append(js, ',')
		}
		js = append(randflake.AppendString(append(js, '"'), id), '"')
	}
	js = append(js, "]}\n"...)
	for format, body := range map[string][]byte{"binary": bin, "text": text, "json": js} {
		for split := 1; split <= len(body); split++ {
			s := &idSink{ctx: context.Background(), format: format, dups: newDupWindow(16)}
			for p := body; len(p) > 0; {
				k := min(split, len(p))
				if _, err := s.Write(p[:k]); err != nil {
					t.Fatalf("%s in pieces of %d: %v", format, split, err)
				}
				p = p[k:]
			}
			if err := s.finish(); err != nil || s.n != int64(len(ids)) {
				t.Fatalf("%s in pieces of %d: %d IDs, %v", format, split, s.n, err)
			}
		}
	}
	for _, c := range []struct{ format, body, want string }{
		{"json", `{"idz":["1"]}`, `want {"ids":[...]}`},
		{"json", `{"ids":["not-an-id"]}`, `"not-an-id" is not an ID`},
		{"json", `{"ids":["1","1"]}`, "duplicate ID 1"},
		{"text", "1\nzzzzzzzzzzzzzzzzzzzzzz\n", "a line longer than an ID"},
		{"json", `{"ids":["1`, "ends inside an ID"},
		{"binary", "1234567", "ends inside an ID"},
	} {
		s := &idSink{ctx: context.Background(), format: c.format, dups: newDupWindow(16)}
		_, err := s.Write([]byte(c.body))
		if err == nil {
			err = s.finish()
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %q: %v, want %q", c.format, c.body, err, c.want)
		}
	}
}
