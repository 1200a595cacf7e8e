package server

import (
	"context"
	"errors"
	"log/slog"
	"math/bits"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/randflake/randflake"
)

// The binary batch format of GET /v1/ids, chosen with
// Accept: application/octet-stream: count IDs, each 8 bytes, the int64's
// two's-complement bits in big-endian order, nothing before, between or
// after them. Content-Length is 8 × count. The answer is written in chunks
// of binaryChunk IDs, each generated into a pooled buffer and written with
// one Write, so that a request holds at most one chunk (512 KiB) whatever
// its count; a smaller answer holds a buffer sized to it (the power of two
// at or above its count: 8 bytes for count=1), and every answer reserves
// its buffer in the budget of answers in flight first (inflight.go). The
// first writes are smaller and flushed (binaryFirst). Once IDs are
// reserved for an answer, a second whose sequence numbers run out (or a
// clock just behind the IDs issued) is waited out, at most twice, instead
// of failing: the answer goes on with the next second's IDs.

// MediaTypeBinary is the media type of the binary batch format.
const MediaTypeBinary = "application/octet-stream"

// DefaultMaxBinaryCount is the default of Config.MaxBinaryCount: 8 MiB of
// IDs.
const DefaultMaxBinaryCount = 1 << 20

// binaryChunk is the number of IDs generated and written at a time.
const binaryChunk = 64 << 10

// binaryFirst is the most IDs an answer makes before it has written and
// flushed its first bytes; each later write is twice the one before, and
// flushed, until writes are of a whole chunk. A flush over HTTP/2 waits
// for the connection's serve loop, which reads the client's frames too: a
// stream reset right after its request (a rapid reset) is seen within the
// first few writes, so that such a stream costs the second's IDs about
// twice what it was sent, not a whole chunk, and an attacker resetting
// streams cannot use up the sequence numbers that honest clients get. An
// honest answer of a chunk or more pays a dozen more writes, the first
// ones small.
const binaryFirst = 64

// chunkClasses is the number of buffer sizes: 1, 2, 4, … binaryChunk IDs.
const chunkClasses = 17 // bits.Len(binaryChunk)

// chunks holds *[]int64 buffers by size: chunks[k] those of 1<<k IDs.
var chunks [chunkClasses]sync.Pool

func init() {
	for k := range chunks {
		chunks[k].New = func() any {
			b := make([]int64, 1<<k)
			return &b
		}
	}
}

// chunkClass returns the class of the buffer for an answer of count IDs:
// the smallest that holds min(count, binaryChunk).
func chunkClass(count int) int {
	return bits.Len(uint(min(count, binaryChunk) - 1))
}

// littleEndian reports whether this machine stores integers little end
// first, in which case the IDs are swapped before they are written.
var littleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// wantsBinary reports whether the request's Accept header asks for the
// binary format: application/octet-stream is listed with a q-value above
// 0 and above that of every other type the service makes (JSON, text).
// Wildcards never choose it.
func wantsBinary(r *http.Request) bool {
	accept := acceptHeader(r)
	if len(accept) < len(MediaTypeBinary) {
		return false // no Accept, or too short to list it: nothing to parse
	}
	var binary, other float64 = -1, -1
	for part := range strings.SplitSeq(accept, ",") {
		mt, params, _ := strings.Cut(part, ";")
		q, ok := qValue(params)
		if !ok {
			continue
		}
		switch strings.ToLower(strings.TrimSpace(mt)) {
		case MediaTypeBinary:
			binary = max(binary, q)
		case "application/json", "text/plain":
			other = max(other, q)
		}
	}
	return binary > 0 && binary >= other
}

// acceptHeader is r.Header.Get("Accept") without canonicalizing the
// key, which net/http has done already.
func acceptHeader(r *http.Request) string {
	if v := r.Header["Accept"]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// qValue returns the q parameter among the parameters of one Accept
// element (1 without one); ok is false for a malformed q.
func qValue(params string) (q float64, ok bool) {
	for p := range strings.SplitSeq(params, ";") {
		k, v, _ := strings.Cut(p, "=")
		if !strings.EqualFold(strings.TrimSpace(k), "q") {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || f < 0 || f > 1 {
			return 0, false
		}
		return f, true
	}
	return 1, true
}

// binaryIDs serves GET /v1/ids in the binary format. count may go up to
// Config.MaxBinaryCount; format is checked as for the other formats but
// has no effect (there is only one binary form), so that a client may ask
// for "binary, else decimal text" in one request.
func (s *Server) binaryIDs(w *recorder, r *http.Request, c caller) {
	q, charged, ok := s.admitQuery(w, r, c, s.maxBinaryCount())
	if !ok {
		return
	}
	class := chunkClass(q.count)
	release, ok := s.reserve(w, r, c, 8<<class)
	if !ok {
		s.refund(charged, q.count)
		return
	}
	defer release()
	bp := chunks[class].Get().(*[]int64)
	defer chunks[class].Put(bp)
	buf := *bp
	left, waits := q.count, 0
	piece := binaryFirst // the IDs of the next write, at most
	rc := http.NewResponseController(w)
	for sent := 0; left > 0; sent++ {
		if r.Context().Err() != nil {
			// The client went away (an HTTP/2 stream reset, a closed
			// connection): no more IDs for nobody. Those already sent
			// stay issued and counted; none are if nothing was.
			if sent == 0 {
				s.refund(charged, q.count)
				w.kind = kindGone
			} else {
				w.abort = true // never a complete-looking short body
			}
			return
		}
		chunk := buf[:min(left, len(buf), piece)]
		for filled := 0; filled < len(chunk); {
			n, err := s.cfg.Generator.GenerateBatch(chunk[filled:])
			filled += n
			if err == nil && n == 0 {
				err = errors.New("GenerateBatch returned no IDs and no error")
			}
			if err == nil {
				continue
			}
			started := sent > 0 || filled > 0
			if started && waits < maxBinaryWaits && perSecond(err) && waitNextSecond(r.Context()) {
				// IDs are reserved or sent already: rather than waste
				// them, take the rest from the next second.
				waits++
				continue
			}
			if sent == 0 {
				// Nothing sent yet: the usual JSON error, and the IDs
				// of this chunk are not handed out (those of the
				// share are given back).
				s.refund(charged, q.count)
				s.generateFailed(w, q.count, err)
				return
			}
			// The headers promised 8 × count bytes: cut the connection so
			// that the client sees a short body, never a complete-looking
			// one. The IDs already sent stay issued, and are counted.
			s.abortBinary(w, q.count, q.count-left, err)
			return
		}
		if sent == 0 {
			h := w.Header()
			h["Content-Type"] = headerBinary
			h["Cache-Control"] = headerNoStore
			h["Content-Length"] = []string{strconv.Itoa(8 * q.count)}
		}
		if littleEndian {
			for i, id := range chunk {
				chunk[i] = int64(bits.ReverseBytes64(uint64(id)))
			}
		}
		_, werr := w.Write(unsafe.Slice((*byte)(unsafe.Pointer(&chunk[0])), 8*len(chunk)))
		s.issued.Add(float64(len(chunk)))
		c.stats.issued.Add(float64(len(chunk)))
		left -= len(chunk)
		if werr == nil && piece < binaryChunk && left > 0 {
			if err := rc.Flush(); !errors.Is(err, http.ErrNotSupported) {
				werr = err // a writer that cannot flush only loses the early check
			}
			piece *= 2
		}
		if werr != nil {
			return // the client went away; net/http closes the connection
		}
	}
	s.batches.Observe(float64(q.count))
}

// maxBinaryWaits bounds the waits for the next second in one binary
// answer.
const maxBinaryWaits = 2

// perSecond reports whether err passes with the next second: this
// second's sequence numbers are used up, or the clock is behind the IDs
// issued (by less than a second, normally).
func perSecond(err error) bool {
	return errors.Is(err, randflake.ErrResourceExhausted) || errors.Is(err, randflake.ErrConsistencyViolation)
}

// waitNextSecond sleeps until the wall clock's next second and reports
// whether it got there before ctx ended.
func waitNextSecond(ctx context.Context) bool {
	now := time.Now()
	t := time.NewTimer(now.Truncate(time.Second).Add(time.Second + time.Millisecond).Sub(now))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// abortBinary ends a binary answer whose headers are sent after a failed
// GenerateBatch: it logs and counts the failure, then makes ServeHTTP
// abort the connection.
func (s *Server) abortBinary(w *recorder, count, sent int, err error) {
	_, kind, _, _ := classify(err)
	s.errs.WithLabelValues(kind).Inc()
	w.kind, w.abort = kind, true
	if n, ok := s.limited.allow(kind, time.Now()); ok {
		attrs := []any{"kind", kind, "count", count, "sent", sent, "err", err}
		if n > 0 {
			attrs = append(attrs, "left_out", n)
		}
		s.log.Log(context.Background(), slog.LevelError, "issuing IDs failed after the answer began; connection aborted", attrs...)
	}
}

// maxBinaryCount is the largest count of a binary request.
func (s *Server) maxBinaryCount() int {
	if s.cfg.MaxBinaryCount == 0 {
		return DefaultMaxBinaryCount
	}
	return s.cfg.MaxBinaryCount
}

// Header values shared by every answer; net/http only reads them.
var (
	headerBinary  = []string{MediaTypeBinary}
	headerJSON    = []string{"application/json"}
	headerText    = []string{"text/plain; charset=utf-8"}
	headerNoStore = []string{"no-store"}
)
