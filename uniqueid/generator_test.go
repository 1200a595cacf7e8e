package uniqueid

import (
	"errors"
	"net/netip"
	"os"
	"sync"
	"testing"
	"time"
)

func TestSequence(t *testing.T) {
	var s sequence
	s.init(func() uint64 { return 0xfffe })
	s.init(func() uint64 { t.Fatal("second init ran"); return 0 })
	type pair struct {
		c  uint16
		th uint32
	}
	for i, w := range []pair{{0xfffe, 0}, {0xffff, 0}, {0, 1}, {1, 1}} {
		if c, th := s.next16(); c != w.c || th != w.th {
			t.Errorf("next16 #%d = (%#x, %d), want (%#x, %d)", i, c, th, w.c, w.th)
		}
	}
	// The httpd 2.4 counter skips 65535.
	var s2 sequence
	s2.init(func() uint64 { return 65533 })
	for i, w := range []pair{{65533, 0}, {65534, 0}, {0, 1}, {1, 1}} {
		if c, th := s2.next65535(); c != w.c || th != w.th {
			t.Errorf("next65535 #%d = (%d, %d), want (%d, %d)", i, c, th, w.c, w.th)
		}
	}
	// The classic pair wraps after 2^48 numbers.
	var s3 sequence
	s3.init(func() uint64 { return 1<<48 - 1 })
	if c, th := s3.next16(); c != 0xffff || th != 0xffffffff {
		t.Errorf("got (%#x, %#x)", c, th)
	}
	if c, th := s3.next16(); c != 0 || th != 0 {
		t.Errorf("after wrap got (%#x, %#x)", c, th)
	}
}

// seqOf returns the sequence number that a generated token's counter and
// thread index encode.
func seqOf(tok Token) uint64 {
	if tok.Layout == Current {
		return uint64(tok.ThreadIndex)*counterPeriod65535 + uint64(tok.Counter)
	}
	return uint64(tok.ThreadIndex)<<16 | uint64(tok.Counter)
}

// checkRun parses tokens made one after another by a single goroutine and
// checks that each takes the next number of the sequence.
func checkRun(t *testing.T, toks []string, layout Layout) []Token {
	t.Helper()
	var out []Token
	for i, s := range toks {
		if len(s) != layout.EncodedLen() {
			t.Fatalf("token %q has length %d", s, len(s))
		}
		tok, err := Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		if tok.Layout != layout {
			t.Fatalf("token %q has layout %v", s, tok.Layout)
		}
		if tok.String() != s {
			t.Fatalf("String() = %q, want %q", tok.String(), s)
		}
		if layout == Current && tok.Counter == 65535 {
			t.Fatalf("current token %q has counter 65535, which httpd never emits", s)
		}
		if i > 0 && seqOf(tok) != seqOf(out[i-1])+1 {
			t.Fatalf("token %d: sequence %#x follows %#x", i, seqOf(tok), seqOf(out[i-1]))
		}
		out = append(out, tok)
	}
	return out
}

func TestClassicGenerator(t *testing.T) {
	addr := netip.MustParseAddr("192.0.2.77")
	g, err := NewClassic(addr)
	if err != nil {
		t.Fatal(err)
	}
	if g.Addr() != addr || g.PID() != uint32(os.Getpid()) {
		t.Fatalf("Addr, PID = %v, %d", g.Addr(), g.PID())
	}
	before := time.Now().Unix()
	var toks []string
	for i := 0; i < 1000; i++ {
		s, err := g.GenerateString()
		if err != nil {
			t.Fatal(err)
		}
		toks = append(toks, s)
	}
	toks = append(toks, string(g.Append(nil)), string(g.Append([]byte("x"))[1:]))
	after := time.Now().Unix()
	for _, tok := range checkRun(t, toks, Classic) {
		if tok.Addr != addr || tok.PID != uint32(os.Getpid()) || tok.Root != ([RootLen]byte{}) {
			t.Fatalf("token %+v has wrong identity", tok)
		}
		if s := tok.Time.Unix(); s < before || s > after {
			t.Fatalf("timestamp %d outside [%d, %d]", s, before, after)
		}
	}
	tok := g.Generate()
	if tok.Layout != Classic || tok.Addr != addr || !Valid(tok.String()) {
		t.Errorf("Generate() = %+v", tok)
	}
	at := time.Date(2030, 1, 2, 3, 4, 5, 6, time.UTC)
	tok, err = Parse(string(g.AppendAt(nil, at)))
	if err != nil || !tok.Time.Equal(at.Truncate(time.Second)) {
		t.Errorf("AppendAt: %+v, %v", tok, err)
	}
}

func TestNewClassicAddresses(t *testing.T) {
	if _, err := NewClassic(netip.MustParseAddr("2001:db8::1")); err == nil {
		t.Error("NewClassic accepted an IPv6 address")
	}
	g, err := NewClassic(netip.MustParseAddr("::ffff:198.51.100.1"))
	if err != nil || g.Addr() != netip.MustParseAddr("198.51.100.1") {
		t.Errorf("v4-mapped address: %v, %v", g, err)
	}
	host, herr := HostIPv4()
	g, err = NewClassic(netip.Addr{})
	switch {
	case herr != nil:
		if err == nil || (errors.Is(herr, ErrNoAddress) && !errors.Is(err, ErrNoAddress)) {
			t.Errorf("no host address (%v) but NewClassic gave %v", herr, err)
		}
		t.Logf("host has no IPv4 address: %v", herr)
	case err != nil:
		t.Errorf("NewClassic(auto): %v", err)
	case g.Addr() != host || host.IsLoopback() || !host.Is4():
		t.Errorf("auto address %v, HostIPv4 %v", g.Addr(), host)
	}
}

func TestPickIPv4(t *testing.T) {
	a := netip.MustParseAddr
	cases := []struct {
		in   []netip.Addr
		want netip.Addr
	}{
		{nil, netip.Addr{}},
		{[]netip.Addr{a("127.0.0.1"), a("::1"), a("fe80::1")}, netip.Addr{}},
		{[]netip.Addr{a("2001:db8::1"), a("10.0.0.5"), a("192.168.1.2")}, a("10.0.0.5")},
		{[]netip.Addr{a("169.254.3.4"), a("0.0.0.0"), a("172.16.0.9")}, a("172.16.0.9")},
		{[]netip.Addr{a("169.254.3.4"), a("169.254.9.9")}, a("169.254.3.4")},
		{[]netip.Addr{a("::ffff:203.0.113.8")}, a("203.0.113.8")},
	}
	for _, c := range cases {
		got, ok := pickIPv4(c.in)
		if got != c.want || ok != c.want.IsValid() {
			t.Errorf("pickIPv4(%v) = %v, %v; want %v", c.in, got, ok, c.want)
		}
	}
}

func TestCurrentGenerator(t *testing.T) {
	g, err := NewCurrent()
	if err != nil {
		t.Fatal(err)
	}
	g2, err := NewCurrent()
	if err != nil {
		t.Fatal(err)
	}
	if g.Root() != g2.Root() || g.Root() == ([RootLen]byte{}) {
		t.Fatalf("roots %x and %x", g.Root(), g2.Root())
	}
	before := time.Now().Unix()
	var toks []string
	for i := 0; i < 1000; i++ {
		gen := g
		if i%2 == 1 {
			gen = g2 // generators of a process share the sequence
		}
		s, err := gen.GenerateString()
		if err != nil {
			t.Fatal(err)
		}
		toks = append(toks, s)
	}
	after := time.Now().Unix()
	for _, tok := range checkRun(t, toks, Current) {
		if tok.Root != g.Root() || tok.PID != 0 || tok.Addr.IsValid() {
			t.Fatalf("token %+v has wrong identity", tok)
		}
		if s := tok.Time.Unix(); s < before || s > after {
			t.Fatalf("timestamp %d outside [%d, %d]", s, before, after)
		}
	}
	tok := g.Generate()
	if tok.Layout != Current || tok.Root != g.Root() || !Valid(tok.String()) {
		t.Errorf("Generate() = %+v", tok)
	}
}

// A clock that steps backwards changes timestamps, not uniqueness.
func TestClockStepBackwards(t *testing.T) {
	cg, err := NewClassic(netip.MustParseAddr("192.0.2.1"))
	if err != nil {
		t.Fatal(err)
	}
	ug, err := NewCurrent()
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var clock int64
	now := func() int64 { mu.Lock(); defer mu.Unlock(); return clock }
	cg.now, ug.now = now, now
	seen := make(map[string]bool)
	// Back an hour, forward to the first second again, back again.
	for step, sec := range []int64{1_800_000_000, 1_799_996_400, 1_800_000_000, 1_799_996_400} {
		mu.Lock()
		clock = sec
		mu.Unlock()
		for i := 0; i < 70000; i++ { // more than a 16-bit counter holds
			for _, s := range []string{string(cg.Append(nil)), string(ug.Append(nil))} {
				if seen[s] {
					t.Fatalf("duplicate token %q after %d clock steps", s, step)
				}
				seen[s] = true
			}
		}
		tok, _ := Parse(string(ug.Append(nil)))
		if tok.Time.Unix() != sec {
			t.Fatalf("timestamp %d, clock %d", tok.Time.Unix(), sec)
		}
	}
}

// TestUniqueConcurrent generates tokens from many goroutines, at far more
// than 65,536 per second per process, and checks that none repeats. Run it
// with -race.
func TestUniqueConcurrent(t *testing.T) {
	const goroutines = 8
	perG := 50000
	if testing.Short() {
		perG = 5000
	}
	cg, err := NewClassic(netip.MustParseAddr("192.0.2.1"))
	if err != nil {
		t.Fatal(err)
	}
	cg2, err := NewClassic(netip.MustParseAddr("192.0.2.1")) // same identity
	if err != nil {
		t.Fatal(err)
	}
	ug, err := NewCurrent()
	if err != nil {
		t.Fatal(err)
	}
	ug2, err := NewCurrent()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		gens [2]interface{ Append([]byte) []byte }
		size int
	}{
		{"classic", [2]interface{ Append([]byte) []byte }{cg, cg2}, ClassicLen},
		{"current", [2]interface{ Append([]byte) []byte }{ug, ug2}, CurrentLen},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bufs := make([][]byte, goroutines)
			start := time.Now()
			var wg sync.WaitGroup
			for i := range bufs {
				wg.Add(1)
				go func(i int) {
					defer wg.Done()
					gen := tc.gens[i%2]
					b := make([]byte, 0, perG*tc.size)
					for j := 0; j < perG; j++ {
						b = gen.Append(b)
					}
					bufs[i] = b
				}(i)
			}
			wg.Wait()
			elapsed := time.Since(start)
			seen := make(map[string]struct{}, goroutines*perG)
			for _, b := range bufs {
				for j := 0; j < len(b); j += tc.size {
					s := string(b[j : j+tc.size])
					if _, dup := seen[s]; dup {
						t.Fatalf("duplicate token %q", s)
					}
					seen[s] = struct{}{}
				}
			}
			if len(seen) != goroutines*perG {
				t.Fatalf("%d tokens, want %d", len(seen), goroutines*perG)
			}
			t.Logf("%d unique tokens from %d goroutines in %v (%.0f/s)",
				len(seen), goroutines, elapsed, float64(len(seen))/elapsed.Seconds())
		})
	}
}

func TestAppendAllocs(t *testing.T) {
	cg, err := NewClassic(netip.MustParseAddr("192.0.2.1"))
	if err != nil {
		t.Fatal(err)
	}
	ug, err := NewCurrent()
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 0, CurrentLen)
	if n := testing.AllocsPerRun(100, func() { buf = cg.Append(buf[:0]) }); n != 0 {
		t.Errorf("ClassicGenerator.Append allocates %v times", n)
	}
	if n := testing.AllocsPerRun(100, func() { buf = ug.Append(buf[:0]) }); n != 0 {
		t.Errorf("CurrentGenerator.Append allocates %v times", n)
	}
}
