// Package statedir is the embedded, single-machine source of node IDs for
// Randflake generators: no server to run, nothing to configure.
//
// A state directory holds the deployment's 16-byte secret and the claims on
// node IDs of the processes of one machine:
//
//	secret          32 hexadecimal digits, created on first use (mode 0600)
//	state           per block of node IDs: the clock when last written and
//	                the newest second any ID on them may carry
//	lock            serialises changes to state (flock, held for milliseconds)
//	blocks/NNNN     one lock file per block of 64 node IDs (flock)
//
// A process claims a range of node IDs (Options.Nodes, 1,024 by default:
// up to 134 million IDs per second) by locking the blocks' files with
// flock. The kernel releases the locks of a process that exits or crashes,
// so a crashed process's node IDs are free again at once, and processes on
// the same machine never hold the same node ID.
//
// Before a process issues an ID on a block, the state records a promise:
// no ID on the block will carry a second after now + Options.Horizon (10s
// by default). The promise is renewed (written durably: temporary file,
// fsync, rename, fsync of the directory) a third of the way through its
// remaining validity, and the generator stops at the promise if renewal
// fails. On a clean release the state records the newest second actually
// used instead. Whoever claims the block next, the same process restarted
// or another one taking over after a crash, starts strictly after the
// recorded second; it prefers blocks whose recorded second has passed, so
// a restart after a crash waits only if every free block was used in the
// last Horizon.
//
// # Assumptions
//
//   - One machine: the directory is on a local file system (flock on
//     network file systems is unreliable) and no other machine uses the
//     same node IDs with the same secret. To combine machines, give each a
//     disjoint Options.FirstNode..LastNode, or use etcd.
//   - The state directory survives restarts, and fsync makes writes
//     durable. A lost or restored-from-backup state directory forgets the
//     recorded seconds.
//   - The wall clock does not step back past a recorded second while the
//     processes are down. A running generator survives steps back (it
//     keeps to its own seconds), but a new process can only tell which
//     seconds were used from the clock and the state. At start-up, if the
//     clock reads earlier than the newest time recorded in the state,
//     Acquire refuses with ErrClockBehind instead of issuing IDs.
//
// Unix only (flock); elsewhere Source reports an error.
package statedir

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/randflake/randflake"
)

// BlockSize is the number of node IDs per lock file: claims are made of
// whole blocks, block b holding node IDs 64b to 64b+63.
const BlockSize = 64

// Defaults of Options.
const (
	DefaultNodes   = 1024             // node IDs per process
	DefaultHorizon = 10 * time.Second // how far ahead a promise reaches
)

// Errors of state directories.
var (
	// ErrClockBehind: the clock reads earlier than a time recorded in the
	// state directory, so it stepped back; no IDs are issued until it has
	// caught up.
	ErrClockBehind = errors.New("statedir: the clock is behind a time recorded in the state directory (it stepped back)")
	// ErrNoFreeNodes: every range of node IDs is claimed by a running
	// process.
	ErrNoFreeNodes = errors.New("statedir: every node-ID range is claimed by a running process")
	// ErrUnsupported: this platform has no flock.
	ErrUnsupported = errors.New("statedir: node-ID claims need flock, which this platform lacks")
)

// Options configures a Source.
type Options struct {
	// Nodes is the number of node IDs a process claims, rounded up to a
	// multiple of BlockSize (0: DefaultNodes). Each issues up to 131,072
	// IDs per second.
	Nodes int64
	// FirstNode and LastNode bound the node IDs this directory hands out,
	// aligned to blocks (FirstNode and LastNode+1 multiples of BlockSize).
	// Zero for both means all of them, 0 to 131071. Machines sharing a
	// secret get disjoint ranges.
	FirstNode, LastNode int64
	// Horizon is how far ahead of the clock a claim is recorded, rounded up
	// to whole seconds (0: DefaultHorizon). After a crash, the crashed
	// process's node IDs can be reused that long after its last renewal.
	Horizon time.Duration

	// Shards and OnError are passed to randflake.LeasedConfig by NewLeased.
	Shards  int
	OnError func(error)
}

// Dir is an open state directory.
type Dir struct {
	path   string
	secret []byte
}

// DefaultPath returns the default state directory of the current user:
// $RANDFLAKE_STATE_DIR if set; else $XDG_STATE_HOME/randflake if
// XDG_STATE_HOME is an absolute path; else, on macOS and Windows, the
// user's configuration directory (os.UserConfigDir) plus "randflake";
// elsewhere ~/.local/state/randflake.
func DefaultPath() (string, error) {
	if p := os.Getenv("RANDFLAKE_STATE_DIR"); p != "" {
		return p, nil
	}
	if p := os.Getenv("XDG_STATE_HOME"); p != "" && filepath.IsAbs(p) {
		return filepath.Join(p, "randflake"), nil
	}
	switch runtime.GOOS {
	case "darwin", "ios", "windows":
		p, err := os.UserConfigDir()
		if err != nil {
			return "", fmt.Errorf("statedir: no default directory: %w", err)
		}
		return filepath.Join(p, "randflake"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("statedir: no default directory: %w", err)
	}
	return filepath.Join(home, ".local", "state", "randflake"), nil
}

// Open opens the state directory at path (DefaultPath if empty), creating
// it (mode 0700) and its secret (mode 0600) on first use. It refuses a
// directory writable by group or others and a secret file that group or
// others may read or write.
func Open(path string) (*Dir, error) {
	if path == "" {
		p, err := DefaultPath()
		if err != nil {
			return nil, err
		}
		path = p
	}
	if err := os.MkdirAll(path, 0o700); err != nil {
		return nil, fmt.Errorf("statedir: %w", err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("statedir: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("statedir: %s is not a directory", path)
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return nil, fmt.Errorf("statedir: %s is writable by group or others (mode %v): chmod go-w it", path, fi.Mode().Perm())
	}
	if err := os.MkdirAll(filepath.Join(path, "blocks"), 0o700); err != nil {
		return nil, fmt.Errorf("statedir: %w", err)
	}
	d := &Dir{path: path}
	secretPath := filepath.Join(path, "secret")
	d.secret, err = LoadSecret(secretPath)
	if errors.Is(err, os.ErrNotExist) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err = d.locked(ctx, func() error {
			var err error
			d.secret, err = LoadSecret(secretPath)
			if !errors.Is(err, os.ErrNotExist) {
				return err // another process created it
			}
			d.secret = make([]byte, 16)
			if _, err := rand.Read(d.secret); err != nil {
				return fmt.Errorf("statedir: %w", err)
			}
			return writeDurably(secretPath, []byte(hex.EncodeToString(d.secret)+"\n"))
		})
	}
	if err != nil {
		return nil, err
	}
	return d, nil
}

// LoadSecret reads a 16-byte secret from a file holding 32 hexadecimal
// digits (surrounding white space ignored) or the 16 bytes themselves. It
// refuses a file that group or others may access (mode bits 0077): chmod
// 600 it. Errors never include the file's contents.
func LoadSecret(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("statedir: secret: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("statedir: secret: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("statedir: secret %s is not a regular file", path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("statedir: secret %s is accessible to group or others (mode %v): chmod 600 it", path, perm)
	}
	data, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return nil, fmt.Errorf("statedir: secret: %w", err)
	}
	if len(data) == 16 {
		return data, nil
	}
	s := bytes.TrimSpace(data)
	secret := make([]byte, 16)
	if len(s) != 32 {
		return nil, fmt.Errorf("statedir: secret %s: want 32 hexadecimal digits or 16 bytes, found %d bytes", path, len(data))
	}
	if _, err := hex.Decode(secret, s); err != nil {
		return nil, fmt.Errorf("statedir: secret %s: want 32 hexadecimal digits or 16 bytes", path)
	}
	return secret, nil
}

// Path returns the directory's path.
func (d *Dir) Path() string { return d.path }

// Secret returns a copy of the directory's 16-byte secret.
func (d *Dir) Secret() []byte { return bytes.Clone(d.secret) }

// NewLeased opens the state directory at path (DefaultPath if empty) and
// returns a generator on node IDs claimed from it, with its secret. This is
// the whole set-up of a process on one machine.
func NewLeased(ctx context.Context, path string, opts Options) (*randflake.Leased, error) {
	d, err := Open(path)
	if err != nil {
		return nil, err
	}
	src, err := d.Source(opts)
	if err != nil {
		return nil, err
	}
	return randflake.NewLeased(ctx, randflake.LeasedConfig{
		Secret:  d.secret,
		Source:  src,
		Shards:  opts.Shards,
		OnError: opts.OnError,
	})
}

// Source is a randflake.LeaseSource on a state directory. It holds at most
// one lease at a time; use one Source per generator. It is safe for
// concurrent use.
type Source struct {
	dir         *Dir
	nodes       int64 // multiple of BlockSize
	first, last int64 // block-aligned node range
	horizon     int64 // seconds
	now         func() time.Time

	mu    sync.Mutex
	claim *claim
}

// claim is a held lease: the locked block files and the lease.
type claim struct {
	lease randflake.Lease
	files []*os.File // lock files of blocks lease.FirstNode/BlockSize...
}

// Source returns a lease source claiming node IDs from d.
func (d *Dir) Source(opts Options) (*Source, error) {
	if !flockSupported {
		return nil, ErrUnsupported
	}
	s := &Source{dir: d, nodes: opts.Nodes, first: opts.FirstNode, last: opts.LastNode, now: time.Now}
	if s.first == 0 && s.last == 0 {
		s.last = randflake.MaxNode
	}
	if s.first < 0 || s.last > randflake.MaxNode || s.first > s.last || s.first%BlockSize != 0 || (s.last+1)%BlockSize != 0 {
		return nil, fmt.Errorf("statedir: node range %d-%d: want 0 <= first <= last <= %d, first and last+1 multiples of %d", s.first, s.last, randflake.MaxNode, BlockSize)
	}
	if s.nodes == 0 {
		s.nodes = DefaultNodes
	}
	if s.nodes < 0 {
		return nil, fmt.Errorf("statedir: negative node count %d", s.nodes)
	}
	s.nodes = (s.nodes + BlockSize - 1) / BlockSize * BlockSize
	if s.nodes > s.last-s.first+1 {
		return nil, fmt.Errorf("statedir: %d node IDs per process exceed the range %d-%d", s.nodes, s.first, s.last)
	}
	h := opts.Horizon
	if h == 0 {
		h = DefaultHorizon
	}
	if h < 0 {
		return nil, fmt.Errorf("statedir: negative horizon %v", h)
	}
	s.horizon = int64((h + time.Second - 1) / time.Second)
	return s, nil
}

// Acquire claims Options.Nodes node IDs: the first free range (by flock)
// whose recorded second has passed, or else the free range whose recorded
// second is the oldest. The lease starts after that second; it ends
// Horizon from now, recorded before Acquire returns.
func (s *Source) Acquire(ctx context.Context) (randflake.Lease, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.claim != nil {
		return randflake.Lease{}, errors.New("statedir: the source already holds a lease")
	}
	k := int(s.nodes / BlockSize)
	var lease randflake.Lease
	err := s.dir.locked(ctx, func() error {
		recs, err := s.dir.readState()
		if err != nil {
			return err
		}
		now := s.now().Unix()
		var newest int64
		for _, r := range recs {
			newest = max(newest, r.at)
		}
		if now < newest {
			return fmt.Errorf("%w: it reads %s, %s was recorded in %s", ErrClockBehind,
				formatTime(now), formatTime(newest), s.dir.path)
		}
		type slot struct {
			block int
			until int64
		}
		var slots []slot
		for b := int(s.first / BlockSize); b+k-1 <= int(s.last/BlockSize); b += k {
			sl := slot{block: b}
			for i := b; i < b+k; i++ {
				sl.until = max(sl.until, recs[i].until)
			}
			slots = append(slots, sl)
		}
		// Ranges whose recorded second has passed first, in order; then
		// the others, soonest first.
		sort.SliceStable(slots, func(i, j int) bool {
			ri, rj := slots[i].until < now, slots[j].until < now
			if ri != rj {
				return ri
			}
			return !ri && slots[i].until < slots[j].until
		})
		for _, sl := range slots {
			files, err := s.dir.lockBlocks(sl.block, k)
			if err != nil {
				return err
			}
			if files == nil {
				continue // held by another process
			}
			start := max(sl.until+1, randflake.Epoch)
			end := max(now, start-1) + s.horizon
			for i := sl.block; i < sl.block+k; i++ {
				recs[i] = record{at: max(recs[i].at, now), until: end}
			}
			if err := s.dir.writeState(recs); err != nil {
				closeAll(files)
				return err
			}
			lease = randflake.Lease{
				FirstNode: int64(sl.block) * BlockSize,
				LastNode:  int64(sl.block+k)*BlockSize - 1,
				Start:     start,
				End:       end,
			}
			s.claim = &claim{lease: lease, files: files}
			return nil
		}
		return fmt.Errorf("%w (%d node IDs each, in %d-%d of %s)", ErrNoFreeNodes, s.nodes, s.first, s.last, s.dir.path)
	})
	return lease, err
}

// held returns the claim of l, or an error.
func (s *Source) held(l randflake.Lease) (*claim, error) {
	c := s.claim
	if c == nil || c.lease.FirstNode != l.FirstNode || c.lease.LastNode != l.LastNode || c.lease.Start != l.Start {
		return nil, fmt.Errorf("statedir: lease on %v is not held by this source", l)
	}
	return c, nil
}

// Renew records a new promise, Horizon from now, and returns the lease
// with it as its end. If a block's lock file has been removed or replaced
// (the directory was tampered with), the lease is lost.
func (s *Source) Renew(ctx context.Context, l randflake.Lease) (randflake.Lease, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.held(l)
	if err != nil {
		return randflake.Lease{}, err
	}
	first := int(c.lease.FirstNode / BlockSize)
	for i, f := range c.files {
		if !s.dir.stillLocked(f, first+i) {
			closeAll(c.files)
			s.claim = nil
			return randflake.Lease{}, fmt.Errorf("statedir: lock file of block %d was removed or replaced: %w", first+i, randflake.ErrLeaseLost)
		}
	}
	now := s.now().Unix()
	end := now + s.horizon
	if end <= c.lease.End {
		return c.lease, nil // the clock has not moved on enough
	}
	err = s.dir.locked(ctx, func() error {
		recs, err := s.dir.readState()
		if err != nil {
			return err
		}
		for i := first; i < first+len(c.files); i++ {
			recs[i] = record{at: max(recs[i].at, now), until: max(recs[i].until, end)}
		}
		return s.dir.writeState(recs)
	})
	if err != nil {
		return randflake.Lease{}, err
	}
	c.lease.End = end
	return c.lease, nil
}

// Release records the newest second used (at least l.Start-1) and frees
// the node IDs. If the record cannot be written, the node IDs are freed
// all the same and the promise recorded last stands.
func (s *Source) Release(ctx context.Context, l randflake.Lease, lastUsed int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.held(l)
	if err != nil {
		return err
	}
	defer func() {
		closeAll(c.files)
		s.claim = nil
	}()
	until := max(lastUsed, c.lease.Start-1)
	now := s.now().Unix()
	first := int(c.lease.FirstNode / BlockSize)
	return s.dir.locked(ctx, func() error {
		recs, err := s.dir.readState()
		if err != nil {
			return err
		}
		for i := first; i < first+len(c.files); i++ {
			recs[i] = record{at: max(recs[i].at, now), until: until}
		}
		return s.dir.writeState(recs)
	})
}

func closeAll(files []*os.File) {
	for _, f := range files {
		f.Close() // releases the flock
	}
}

func formatTime(sec int64) string {
	return time.Unix(sec, 0).UTC().Format(time.RFC3339)
}

// record is the state of one block.
type record struct {
	at    int64 // the newest clock reading written with it
	until int64 // no ID on the block carries a later second
}

const stateHeader = "randflake statedir 1"

// readState reads the state file; a missing file is an empty state.
func (d *Dir) readState() (map[int]record, error) {
	path := filepath.Join(d.path, "state")
	data, err := os.ReadFile(path)
	recs := map[int]record{}
	if errors.Is(err, os.ErrNotExist) {
		return recs, nil
	}
	if err != nil {
		return nil, fmt.Errorf("statedir: %w", err)
	}
	lines := strings.Split(string(data), "\n")
	if lines[0] != stateHeader {
		return nil, fmt.Errorf("statedir: %s: not a state file (first line %q)", path, lines[0])
	}
	for n, line := range lines[1:] {
		if line == "" || line[0] == '#' {
			continue
		}
		f := strings.Fields(line)
		var v [3]int64
		ok := len(f) == 3
		for i := 0; ok && i < 3; i++ {
			v[i], err = strconv.ParseInt(f[i], 10, 64)
			ok = err == nil && v[i] >= 0
		}
		if !ok || v[0] > randflake.MaxNode/BlockSize {
			return nil, fmt.Errorf("statedir: %s:%d: malformed line %q", path, n+2, line)
		}
		recs[int(v[0])] = record{at: v[1], until: v[2]}
	}
	return recs, nil
}

// writeState replaces the state file durably.
func (d *Dir) writeState(recs map[int]record) error {
	blocks := make([]int, 0, len(recs))
	for b := range recs {
		blocks = append(blocks, b)
	}
	sort.Ints(blocks)
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "%s\n# block recorded-at used-until: no ID on node IDs %d*block to %d*block+%d carries a second\n# after used-until (Unix seconds); recorded-at is the newest clock reading written.\n",
		stateHeader, BlockSize, BlockSize, BlockSize-1)
	for _, b := range blocks {
		fmt.Fprintf(&buf, "%d %d %d\n", b, recs[b].at, recs[b].until)
	}
	return writeDurably(filepath.Join(d.path, "state"), buf.Bytes())
}

// writeDurably replaces path with data (mode 0600): a temporary file is
// written and synced, renamed over path, and the directory synced. Callers
// hold the directory lock, so the temporary name is theirs.
func writeDurably(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("statedir: %w", err)
	}
	err = f.Chmod(0o600)
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		err = syncDir(filepath.Dir(path))
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("statedir: writing %s: %w", path, err)
	}
	return nil
}

func syncDir(path string) error {
	d, err := os.Open(path)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && runtime.GOOS != "windows" {
		return err
	}
	return nil
}

// locked runs fn holding the directory lock, waiting for it within ctx.
func (d *Dir) locked(ctx context.Context, fn func() error) error {
	f, err := os.OpenFile(filepath.Join(d.path, "lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("statedir: %w", err)
	}
	defer f.Close()
	for wait := time.Millisecond; ; wait = min(2*wait, 20*time.Millisecond) {
		ok, err := tryLock(f)
		if err != nil {
			return fmt.Errorf("statedir: locking %s: %w", f.Name(), err)
		}
		if ok {
			break
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("statedir: waiting for %s: %w", f.Name(), ctx.Err())
		case <-t.C:
		}
	}
	return fn() // closing f releases the lock
}

func (d *Dir) blockPath(b int) string {
	return filepath.Join(d.path, "blocks", fmt.Sprintf("%04d", b))
}

// lockBlocks locks the files of blocks first..first+k-1 without waiting.
// It returns nil files if another process holds one of them.
func (d *Dir) lockBlocks(first, k int) ([]*os.File, error) {
	files := make([]*os.File, 0, k)
	for b := first; b < first+k; b++ {
		f, err := os.OpenFile(d.blockPath(b), os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			closeAll(files)
			return nil, fmt.Errorf("statedir: %w", err)
		}
		ok, err := tryLock(f)
		if err != nil || !ok {
			f.Close()
			closeAll(files)
			if err != nil {
				return nil, fmt.Errorf("statedir: locking %s: %w", f.Name(), err)
			}
			return nil, nil
		}
		files = append(files, f)
	}
	return files, nil
}

// stillLocked reports whether f, a locked lock file, is still the file at
// block b's path.
func (d *Dir) stillLocked(f *os.File, b int) bool {
	held, err := f.Stat()
	if err != nil {
		return false
	}
	cur, err := os.Stat(d.blockPath(b))
	return err == nil && os.SameFile(held, cur)
}
