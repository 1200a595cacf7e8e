package loadclient

import (
	"bufio"
	binenc "encoding/binary"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/randflake/randflake"
)

// fakeService answers GET /v1/ids?count=N as randflake serve does, in the
// format its Accept header asks for, with IDs that are all distinct (a
// counter through a bijection, so that they look random). Its hook, if
// set, sees every request first, numbered from 1, and may answer it
// instead.
type fakeService struct {
	hook func(n int64, w http.ResponseWriter, r *http.Request) (answered bool)

	next   atomic.Uint64 // IDs handed out
	calls  atomic.Int64  // requests received
	active atomic.Int64  // requests being served

	mu       sync.Mutex
	arrivals []time.Time // of every request
}

// start serves s on a loopback port until the test ends.
func (s *fakeService) start(t *testing.T) string {
	t.Helper()
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return ts.URL
}

// times returns when the requests arrived, in order.
func (s *fakeService) times() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.arrivals...)
}

func (s *fakeService) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.active.Add(1)
	defer s.active.Add(-1)
	s.mu.Lock()
	s.arrivals = append(s.arrivals, time.Now())
	s.mu.Unlock()
	n := s.calls.Add(1)
	if s.hook != nil && s.hook(n, w, r) {
		return
	}
	count, err := strconv.Atoi(r.URL.Query().Get("count"))
	if r.URL.Path != "/v1/ids" || err != nil || count < 1 {
		http.Error(w, `{"error":"bad request","kind":"bad_request"}`, http.StatusBadRequest)
		return
	}
	base := s.next.Add(uint64(count)) - uint64(count)
	writeIDs(w, r.Header.Get("Accept"), count, func(i int) int64 { return mix(base + uint64(i)) })
}

// writeIDs writes the answer of count IDs, id(0) to id(count-1), in the
// format accept asks for, as it is made.
func writeIDs(w http.ResponseWriter, accept string, count int, id func(int) int64) {
	ctype := accept
	if accept == "text/plain" {
		ctype += "; charset=utf-8"
	} else if accept != "application/octet-stream" {
		ctype = "application/json"
	}
	w.Header().Set("Content-Type", ctype)
	bw := bufio.NewWriterSize(w, 32<<10)
	defer bw.Flush()
	var buf []byte
	if ctype == "application/json" {
		bw.WriteString(`{"ids":[`)
	}
	for i := range count {
		buf = buf[:0]
		switch accept {
		case "application/octet-stream":
			buf = binenc.BigEndian.AppendUint64(buf, uint64(id(i)))
		case "text/plain":
			buf = append(randflake.AppendString(buf, id(i)), '\n')
		default:
			if i > 0 {
				buf = append(buf, ',')
			}
			buf = append(randflake.AppendString(append(buf, '"'), id(i)), '"')
		}
		if _, err := bw.Write(buf); err != nil {
			return // the client is gone
		}
	}
	if ctype == "application/json" {
		bw.WriteString("]}\n")
	}
}

// mix is a bijection of the 64-bit numbers (splitmix64's finalizer).
func mix(z uint64) int64 {
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return int64(z ^ z>>31)
}
