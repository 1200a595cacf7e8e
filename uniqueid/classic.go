package uniqueid

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"time"
)

// ErrNoAddress is returned by NewClassic when no address is configured and
// the host has no usable non-loopback IPv4 address.
var ErrNoAddress = errors.New("uniqueid: no non-loopback IPv4 address on this host; configure one")

// classicSeq is shared by every ClassicGenerator of the process, so that
// generators configured with the same address cannot collide.
var classicSeq sequence

// classicStart follows mod_unique_id for the counter, which starts at the
// current microseconds divided by 10, modulo 65536, and adds a random
// starting thread index. The latter makes it unlikely that a process that
// reuses the address and PID of a predecessor (PID 1 in a restarted
// container, say) repeats that predecessor's tokens within the same second.
func classicStart() uint64 {
	counter := uint64(time.Now().Nanosecond()/1000/10) % 65536
	return uint64(rand.Uint32())<<16 | counter
}

// ClassicGenerator makes tokens of the Classic layout: timestamp, IPv4
// address of the machine, process ID, counter and thread index.
//
// Its methods are safe for concurrent use by any number of goroutines. The
// zero value is not usable; create generators with NewClassic.
type ClassicGenerator struct {
	addr [4]byte
	pid  uint32
	now  func() int64 // seconds since the epoch; nil means the system clock

	// The record is three 48-bit chunks: timestamp and the first half of
	// the address; the second half of the address and the PID, which never
	// change and are encoded once; counter and thread index.
	addrHi uint64
	mid    [8]byte
}

func newClassicGenerator(addr [4]byte, pid uint32) *ClassicGenerator {
	g := &ClassicGenerator{addr: addr, pid: pid}
	g.addrHi = uint64(addr[0])<<8 | uint64(addr[1])
	put48(g.mid[:], uint64(addr[2])<<40|uint64(addr[3])<<32|uint64(pid), &classicEncode)
	return g
}

// NewClassic returns a generator of Classic tokens for the IPv4 address
// addr. If addr is the zero netip.Addr, the host's first non-loopback IPv4
// address is used (see HostIPv4), and ErrNoAddress is returned if there is
// none. The process ID comes from os.Getpid.
//
// All ClassicGenerators of a process draw their counters and thread indices
// from one process-wide sequence, so they never produce the same token even
// when configured with the same address.
func NewClassic(addr netip.Addr) (*ClassicGenerator, error) {
	if !addr.IsValid() {
		a, err := HostIPv4()
		if err != nil {
			return nil, err
		}
		addr = a
	}
	addr = addr.Unmap()
	if !addr.Is4() {
		return nil, fmt.Errorf("uniqueid: classic tokens need an IPv4 address, have %v", addr)
	}
	classicSeq.init(classicStart)
	return newClassicGenerator(addr.As4(), uint32(os.Getpid())), nil
}

// Addr returns the IPv4 address written into every token.
func (g *ClassicGenerator) Addr() netip.Addr { return netip.AddrFrom4(g.addr) }

// PID returns the process ID written into every token.
func (g *ClassicGenerator) PID() uint32 { return g.pid }

func (g *ClassicGenerator) unix() int64 {
	if g.now != nil {
		return g.now()
	}
	return unixNow()
}

// Append appends a new 24-character token, stamped with the current second,
// to dst and returns the extended slice. It allocates only if dst lacks the
// capacity.
func (g *ClassicGenerator) Append(dst []byte) []byte {
	return g.appendAt(dst, g.unix())
}

// AppendAt is like Append but stamps the token with the second of t, for
// callers that already know when the request arrived. The timestamp field
// holds the low 32 bits of t's Unix time, as in httpd. Uniqueness does not
// depend on t.
func (g *ClassicGenerator) AppendAt(dst []byte, t time.Time) []byte {
	return g.appendAt(dst, t.Unix())
}

func (g *ClassicGenerator) appendAt(dst []byte, sec int64) []byte {
	counter, thread := classicSeq.next16()
	dst, out := extend(dst, ClassicLen)
	put48(out[0:8], uint64(uint32(sec))<<16|g.addrHi, &classicEncode)
	copy(out[8:16], g.mid[:])
	put48(out[16:24], uint64(counter)<<32|uint64(thread), &classicEncode)
	return dst
}

// GenerateString returns a new token. The error is always nil; the
// signature lets a ClassicGenerator serve as a Source for Middleware.
func (g *ClassicGenerator) GenerateString() (string, error) {
	var buf [ClassicLen]byte
	return string(g.Append(buf[:0])), nil
}

// Generate returns a new token in decoded form.
func (g *ClassicGenerator) Generate() Token {
	counter, thread := classicSeq.next16()
	return Token{
		Layout:      Classic,
		Time:        time.Unix(int64(uint32(g.unix())), 0).UTC(),
		Addr:        netip.AddrFrom4(g.addr),
		PID:         g.pid,
		Counter:     counter,
		ThreadIndex: thread,
	}
}

// HostIPv4 returns the IPv4 address that NewClassic uses when none is
// configured: the first IPv4 address, in interface order, of an interface
// that is up and not a loopback interface, preferring a global unicast
// (including private) address over a link-local one. It returns
// ErrNoAddress if there is none.
func HostIPv4() (netip.Addr, error) {
	ifaces, err := net.Interfaces()
	if err != nil {
		return netip.Addr{}, fmt.Errorf("uniqueid: listing network interfaces: %w", err)
	}
	var cands []netip.Addr
	for _, ifc := range ifaces {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(ipn.IP); ok {
					cands = append(cands, ip)
				}
			}
		}
	}
	if a, ok := pickIPv4(cands); ok {
		return a, nil
	}
	return netip.Addr{}, ErrNoAddress
}

// pickIPv4 chooses among candidate addresses as HostIPv4 documents.
func pickIPv4(cands []netip.Addr) (netip.Addr, bool) {
	var linkLocal netip.Addr
	for _, a := range cands {
		a = a.Unmap()
		switch {
		case !a.Is4() || a.IsLoopback() || a.IsUnspecified():
		case a.IsGlobalUnicast():
			return a, true
		case a.IsLinkLocalUnicast() && !linkLocal.IsValid():
			linkLocal = a
		}
	}
	return linkLocal, linkLocal.IsValid()
}
