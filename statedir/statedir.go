// Package statedir is the embedded, single-machine source of node IDs for
// Randflake generators: no server to run, nothing to configure.
//
// A state directory holds the deployment's 16-byte secret and the claims on
// node IDs of the processes of one machine:
//
//	secret          32 hexadecimal digits, created on first use (mode 0600)
//	state           per block of node IDs: the clock when last written and
//	                the newest second any ID on them may carry, with a
//	                checksum (see below)
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
// last Horizon. While it waits it holds the blocks and records nothing, so
// a process stopped or restarted during the wait does not push the start
// further out.
//
// # History it cannot see is history it waits out
//
// The state file ends in a SHA-256 checksum of its contents. A file that
// is missing, truncated, edited, of an older version, or otherwise fails
// its check means the history of every block is unknown: an earlier holder
// may have promised seconds up to now + the longest horizon. The process
// then rewrites the state to say so (a line "unrecorded UNTIL" covering
// every block without a record), keeps the damaged file as state.corrupt,
// logs the wait, and uses no block before UNTIL has passed: about 11
// seconds with the default horizon. A brand-new directory gets its state
// file with its secret, so processes on the directory's own secret never
// wait there; with a secret from outside (Options.ExternalSecret) the
// first processes on a directory wait even so, since IDs may have been
// issued under that secret before the directory existed (the state then
// records that the wait was made: "history external"). A file that passes its checksum but holds impossible values
// (seconds outside the lifetime of Randflake IDs, a block twice) is
// refused with ErrCorruptState: someone forged it.
//
// # Trust nothing it does not own
//
// The directory and blocks/ must be real directories (not symbolic links)
// of the current user or root, not writable by group or others; every file
// in them must be a regular file of theirs, opened without following links
// and without blocking, with bounded reads; the secret must not be
// accessible to group or others. Anything else is refused with an error
// that names the path and the fix. Every second read is checked to lie in
// the lifetime of Randflake IDs before any arithmetic, and no file is ever
// written that a later start would refuse.
//
// # Assumptions
//
//   - One machine: the directory is on a local file system (flock on
//     network file systems is unreliable) and no other machine uses the
//     same node IDs with the same secret. To combine machines, give each a
//     disjoint Options.FirstNode..LastNode, or use etcd.
//   - fsync makes writes durable. A state directory that is lost or
//     restored from an old backup is detected only if its state file is
//     missing or fails its check; a consistent old copy of the whole
//     directory is not (restore the secret alone, never old state).
//   - No process of a directory uses a longer Horizon than a process
//     waiting after a loss waits out: the longer of its own Horizon and
//     DefaultHorizon. Give every process of a directory the same Horizon.
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
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sort"
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
	// Every process of a directory should use the same Horizon: when the
	// history is unknown, a process waits out the longer of its own
	// Horizon and DefaultHorizon.
	Horizon time.Duration
	// ExternalSecret says that the generator's secret does not come from
	// this directory (a fleet secret from a file or the environment). IDs
	// under it may then have been issued before this directory existed
	// (a container restarted on an empty directory), so a missing state
	// file is unknown history, waited out, even in a brand-new directory.
	ExternalSecret bool
	// Logger receives what the source does that an operator should know:
	// history found unknown (and the wait it costs), waits for a previous
	// holder's promise, a corrupt state file. Nil: slog.Default(). It is
	// also the Leased generator's logger in NewLeased.
	Logger *slog.Logger

	// Shards and OnError are passed to randflake.LeasedConfig by NewLeased.
	Shards  int
	OnError func(error)
}

// Dir is an open state directory.
type Dir struct {
	path    string
	secret  []byte
	created bool // Open created the secret
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
// it (mode 0700) and its secret (mode 0600) on first use. The directory and
// its blocks directory must be real directories (not links) of the current
// user or root that group and others cannot write; the secret, a regular
// file of theirs that group and others cannot access. Anything else is
// refused with the path and the fix.
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
	if err := checkDir(path); err != nil {
		return nil, err
	}
	blocks := filepath.Join(path, "blocks")
	if err := os.Mkdir(blocks, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("statedir: %w", err)
	}
	if err := checkDir(blocks); err != nil {
		return nil, err
	}
	d := &Dir{path: path}
	secretPath := filepath.Join(path, "secret")
	var err error
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
			if err := writeDurably(secretPath, []byte(hex.EncodeToString(d.secret)+"\n")); err != nil {
				return err
			}
			d.created = true
			// No ID was ever issued under the new secret: its history is
			// complete, and empty. (A crash before this write leaves a
			// secret without a state file: unknown history, waited out.)
			return d.writeState(state{unrecorded: randflake.Epoch, recs: map[int]record{}})
		})
	}
	if err != nil {
		return nil, err
	}
	return d, nil
}

// Created reports whether Open created the directory's secret: this is
// the directory's first use. Commands tell their user so, and where.
func (d *Dir) Created() bool { return d.created }

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
	opts.ExternalSecret = false // the directory's own secret
	src, err := d.Source(opts)
	if err != nil {
		return nil, err
	}
	return randflake.NewLeased(ctx, randflake.LeasedConfig{
		Secret:  d.secret,
		Source:  src,
		Shards:  opts.Shards,
		OnError: opts.OnError,
		Logger:  src.log,
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
	unknownWait int64 // seconds: how long unknown history is waited out
	external    bool
	log         *slog.Logger
	now         func() time.Time
	sleep       func(context.Context, time.Duration) error

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
	s := &Source{dir: d, nodes: opts.Nodes, first: opts.FirstNode, last: opts.LastNode,
		external: opts.ExternalSecret, log: opts.Logger, now: time.Now, sleep: sleepCtx}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.first == 0 && s.last == 0 {
		s.last = randflake.MaxNode
	}
	if err := randflake.CheckNodeRange(s.first, s.last); err != nil {
		return nil, fmt.Errorf("statedir: %w", err)
	}
	if s.first%BlockSize != 0 || (s.last+1)%BlockSize != 0 {
		return nil, fmt.Errorf("statedir: node range %d-%d: first and last+1 must be multiples of %d", s.first, s.last, BlockSize)
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
	s.unknownWait = max(s.horizon, int64(DefaultHorizon/time.Second))
	return s, nil
}

// clock returns the current second, refusing one outside the lifetime of
// Randflake IDs (a clock far off, or an ID space used up).
func (s *Source) clock() (int64, error) {
	now := s.now().Unix()
	if now < randflake.Epoch || now > randflake.MaxTimestamp {
		return 0, fmt.Errorf("statedir: the clock reads %s, outside the lifetime of Randflake IDs (%s to %s)",
			formatTime(now), formatTime(randflake.Epoch), formatTime(randflake.MaxTimestamp))
	}
	return now, nil
}

// loadState reads the state; the caller holds the directory lock. History
// it cannot see is history it waits out: with no state file, with one that
// fails its check, or with one whose history is the directory's own
// secret's while this source's secret comes from outside, every block may
// have been used up to now plus the longest promise, and the state is
// rewritten to say so at once, so that a process restarted during the wait
// does not push it further out. A file that passes its check but holds
// impossible values is refused.
func (s *Source) loadState(now int64) (state, error) {
	data, err := s.dir.readStateFile()
	if err != nil {
		return state{}, err
	}
	var why string
	switch {
	case data == nil && s.external:
		why = "no state file, and the secret comes from outside the directory"
	case data == nil:
		why = "no state file, but the directory's secret already existed"
	default:
		st, err := parseState(data)
		if err == nil && (st.external || !s.external) {
			return st, nil
		}
		if err == nil {
			why = "the history is that of the directory's own secret, and this secret comes from outside"
			break
		}
		if !errors.Is(err, errUnverified) {
			return state{}, fmt.Errorf("%w, in %s: move it away after checking it (the next start then waits out the horizon)",
				err, s.dir.statePath())
		}
		why = err.Error()
		if err := writeDurably(s.dir.statePath()+".corrupt", data); err != nil {
			s.log.Warn("statedir: could not keep a copy of the state file", "err", err)
		}
	}
	st := state{unrecorded: min(now+s.unknownWait, randflake.MaxTimestamp), external: s.external, recs: map[int]record{}}
	s.log.Warn("statedir: the history of the node IDs is unknown: none is used before the longest promise has passed",
		"dir", s.dir.path, "reason", why, "until", formatTime(st.unrecorded), "wait", fmt.Sprintf("%ds", st.unrecorded-now+1))
	if err := s.dir.writeState(st); err != nil {
		return state{}, err
	}
	return st, nil
}

// Acquire claims Options.Nodes node IDs: the first free range (by flock)
// whose recorded second has passed, or else the free range whose recorded
// second is the oldest. The lease starts after that second. If that is
// still ahead of the clock, Acquire holds the range and waits, within ctx,
// recording nothing new meanwhile; then it records the lease's end,
// Horizon from now, before returning.
func (s *Source) Acquire(ctx context.Context) (randflake.Lease, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.claim != nil {
		return randflake.Lease{}, errors.New("statedir: the source already holds a lease")
	}
	k := int(s.nodes / BlockSize)
	var c *claim
	var start int64
	for {
		waitFor := int64(0)
		err := s.dir.locked(ctx, func() error {
			now, err := s.clock()
			if err != nil {
				return err
			}
			st, err := s.loadState(now)
			if err != nil {
				return err
			}
			if newest := st.newest(); now < newest {
				return fmt.Errorf("%w: it reads %s, %s was recorded in %s", ErrClockBehind,
					formatTime(now), formatTime(newest), s.dir.path)
			}
			if c == nil {
				if c, err = s.claimFree(st, now, k); err != nil {
					return err
				}
			}
			first := int(c.lease.FirstNode / BlockSize)
			for b := first; b < first+k; b++ {
				start = max(start, st.until(b)+1)
			}
			if start > randflake.MaxTimestamp {
				return fmt.Errorf("statedir: node IDs %d-%d are used up to the last second of Randflake IDs", c.lease.FirstNode, c.lease.LastNode)
			}
			if start > now {
				waitFor = start
				return nil
			}
			end := min(now+s.horizon, randflake.MaxTimestamp)
			for b := first; b < first+k; b++ {
				st.recs[b] = record{at: max(st.recs[b].at, now), until: end}
			}
			if err := s.dir.writeState(st); err != nil {
				return err
			}
			c.lease.Start, c.lease.End = start, end
			return nil
		})
		if err == nil && waitFor == 0 {
			s.claim = c
			return c.lease, nil
		}
		if err == nil {
			s.log.Info("statedir: waiting for the previous holder's last second to pass",
				"nodes", fmt.Sprintf("%d-%d", c.lease.FirstNode, c.lease.LastNode), "start", formatTime(waitFor))
			if err = s.sleep(ctx, time.Unix(waitFor, 0).Sub(s.now())); err != nil {
				err = fmt.Errorf("statedir: waiting for node IDs %d-%d to be free at %s: %w",
					c.lease.FirstNode, c.lease.LastNode, formatTime(waitFor), err)
			}
		}
		if err != nil {
			if c != nil {
				closeAll(c.files)
			}
			return randflake.Lease{}, err
		}
	}
}

// claimFree locks a free range of k blocks: one whose recorded second has
// passed, in order, else the one whose recorded second is the oldest.
func (s *Source) claimFree(st state, now int64, k int) (*claim, error) {
	type slot struct {
		block int
		until int64
	}
	var slots []slot
	for b := int(s.first / BlockSize); b+k-1 <= int(s.last/BlockSize); b += k {
		sl := slot{block: b}
		for i := b; i < b+k; i++ {
			sl.until = max(sl.until, st.until(i))
		}
		if sl.until < randflake.MaxTimestamp {
			slots = append(slots, sl)
		}
	}
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
			return nil, err
		}
		if files != nil {
			return &claim{files: files, lease: randflake.Lease{
				FirstNode: int64(sl.block) * BlockSize,
				LastNode:  int64(sl.block+k)*BlockSize - 1,
			}}, nil
		}
	}
	return nil, fmt.Errorf("%w (%d node IDs each, in %d-%d of %s)", ErrNoFreeNodes, s.nodes, s.first, s.last, s.dir.path)
}

// held returns the claim of l, or an error.
func (s *Source) held(l randflake.Lease) (*claim, error) {
	c := s.claim
	if c == nil || !c.lease.SameClaim(l) {
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
	now, err := s.clock()
	if err != nil {
		return randflake.Lease{}, err
	}
	end := min(now+s.horizon, randflake.MaxTimestamp)
	if end <= c.lease.End {
		return c.lease, nil // the clock has not moved on enough
	}
	err = s.dir.locked(ctx, func() error {
		st, err := s.loadState(now)
		if err != nil {
			return err
		}
		for i := first; i < first+len(c.files); i++ {
			st.recs[i] = record{at: max(st.recs[i].at, now), until: max(st.until(i), end)}
		}
		return s.dir.writeState(st)
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
	if lastUsed > c.lease.End {
		return fmt.Errorf("statedir: release of %v reports second %s, after the lease's end; the promise stands", c.lease, formatTime(lastUsed))
	}
	until := max(lastUsed, c.lease.Start-1, randflake.Epoch)
	now := max(s.now().Unix(), randflake.Epoch)
	first := int(c.lease.FirstNode / BlockSize)
	return s.dir.locked(ctx, func() error {
		st, err := s.loadState(min(now, randflake.MaxTimestamp))
		if err != nil {
			return err
		}
		for i := first; i < first+len(c.files); i++ {
			st.recs[i] = record{at: min(max(st.recs[i].at, now), randflake.MaxTimestamp), until: until}
		}
		return s.dir.writeState(st)
	})
}

func formatTime(sec int64) string {
	return time.Unix(sec, 0).UTC().Format(time.RFC3339)
}
