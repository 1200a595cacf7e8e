// Package statedir is the embedded, single-machine source of node IDs for
// Randflake generators: no server to run, nothing to configure.
//
// A state directory holds the deployment's 16-byte secret and the claims on
// node IDs of the processes of one machine:
//
//	secret          32 hexadecimal digits, created on first use (mode 0600)
//	state           the lease engine's fleet marker and, per block of node
//	                IDs, its record of the newest second any ID on them may
//	                carry; framed with a generation number and a checksum
//	state.corrupt   a copy of the last state file that failed its check
//	lock            serialises changes to state (flock, held for
//	                milliseconds) and holds the directory's generation
//	blocks/NNNN     one lock file per block of 64 node IDs (flock)
//
// A Source is the lease engine of package lease (lease.BlockSource,
// which applies the rules of docs/leases.md, "The rules") on the
// directory's Store, which provides the storage: claims, records, marker.
//
// A process claims a range of node IDs (Options.Nodes, 1,024 by default:
// up to 134 million IDs per second) by locking the blocks' files with
// flock. The kernel releases the locks of a process that exits or crashes,
// so a crashed process's node IDs are free again at once, and processes on
// the same machine never hold the same node ID.
//
// Before a process issues an ID on a block, the state records a promise:
// no ID on the block will carry a second after now + Options.Horizon (10s
// by default). The promise is renewed (written durably: the generation to
// the lock file and fsync, then the state to a temporary file created
// afresh, fsync, rename, fsync of the directory) a third of the way through
// its remaining validity, and the generator stops at the promise if
// renewal fails. On a clean release the state records the newest second
// actually used instead. Whoever claims the block next, the same process
// restarted or another one taking over after a crash, starts strictly
// after the recorded second; it prefers blocks whose recorded second has
// passed, so a restart after a crash waits only if every free block was
// used in the last Horizon. While it waits it holds the blocks and records
// nothing, so a process stopped or restarted during the wait does not push
// the start further out.
//
// # History it cannot see is history it waits out
//
// The engine signs each record and the marker under a key derived from the
// directory's secret (the same for every process of the directory,
// whatever secret its generator uses), and the marker carries a digest of
// every record, the node range and the directory's generation. The state
// file ends in a SHA-256 checksum against torn writes. The history of every
// block is unknown, and waited out, when
//
//   - there is no state file, or it fails its checksum (truncated, edited,
//     emptied, lines repeated or appended), or it was written by an older
//     version; the damaged file is kept as state.corrupt;
//   - a record or the marker fails its signature (edited by hand), or a
//     record was deleted or replaced by an older one (the digest);
//   - the state file was put back from an older copy: each write first
//     records its generation in the lock file, which is opened in place
//     and never replaced, so an older state file names an older generation
//     than the lock file (a crash between the two writes looks the same:
//     one wait, never trust in a stale file); a process holding a lease
//     when it happens loses it (ErrHistoryRolledBack) and stops at its
//     promise;
//   - the generator's secret comes from outside the directory
//     (Options.ExternalSecret) and the history is complete only for the
//     directory's own secret (a brand-new directory included): IDs may have
//     been issued under that secret before the directory existed.
//
// Then any earlier holder may have promised any second up to now + the
// longest horizon (the longer of Options.MaxHorizon, DefaultHorizon by
// default, and any Horizon recorded in the marker; a process whose own
// Horizon passes MaxHorizon is refused). The process records that in
// the marker at once, logs the reason and the wait, and uses no block
// before it has passed: about 11 seconds with the default horizon. Only a
// brand-new directory, whose secret Open has just created, needs no wait
// for processes on that secret: no ID was ever issued under it. A state
// file that passes its checksum but holds lines this package never writes
// (a block twice or off its boundary, a malformed generation) is refused
// with ErrCorruptState: someone forged it.
//
// # Clocks are checked per block
//
// Each record carries the writer's clock. A block whose record is ahead of
// this process's clock is not used until the clock has passed it; the
// process takes another free block. A holder whose clock jumped an hour
// ahead thus costs only the blocks it touched. Only when every free block
// carries a time ahead of the clock does Acquire fail with ErrClockBehind.
//
// # Trust nothing it does not own
//
// The directory and blocks/ must be real directories (not symbolic links)
// of the current user or root, not writable by group or others; every file
// in them must be a regular file of theirs, opened without following links
// and without blocking, with bounded reads; the secret must not be
// accessible to group or others. Anything else is refused with an error
// that names the path and the fix. The engine checks every second it reads
// to lie in the lifetime of Randflake IDs before any arithmetic, and no
// file is ever written that a later start would refuse.
//
// # Assumptions
//
//   - One machine: the directory is on a local file system (flock on
//     network file systems is unreliable) and no other machine uses the
//     same node IDs with the same secret. To combine machines, give each a
//     disjoint Options.FirstNode..LastNode, or use etcd, PostgreSQL or the
//     Kubernetes API (modules etcdlease, pglease, kubelease).
//     Every process of one directory uses the same node range (the marker
//     records it; another is refused with ErrFleetMismatch).
//   - fsync makes writes durable. A consistent old copy of the whole
//     directory (state file and lock file together, restored while no
//     process runs) cannot be told from the real history: restore the
//     secret alone, never old state, or, after such a restore, call
//     Source.ResetHistory (or delete the state file) so that the next
//     claims wait out the horizon.
//   - The wall clock does not step back past a block's recorded second
//     while the processes are down without the records showing it: a new
//     process can only tell which seconds were used from the clock and the
//     state. A running generator survives steps back (it keeps to its own
//     seconds).
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
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/randflake/randflake"
	"github.com/randflake/randflake/lease"
)

// BlockSize is the number of node IDs per lock file: claims are made of
// whole blocks, block b holding node IDs 64b to 64b+63.
const BlockSize = 64

// Defaults of Options.
const (
	DefaultNodes   = 1024             // node IDs per process
	DefaultHorizon = 10 * time.Second // how far ahead a promise reaches
)

// Errors of state directories. Those of the lease engine are the
// engine's own, so errors.Is matches either name.
var (
	// ErrClockBehind: this machine's clock reads earlier than a time
	// recorded for every free block of node IDs, so it stepped back (or
	// another process's clock ran ahead); no block is used until the clock
	// has caught up with its record.
	ErrClockBehind = lease.ErrClockBehind
	// ErrNoFreeNodes: every range of node IDs is claimed by a running
	// process (or used up).
	ErrNoFreeNodes = lease.ErrNoFreeNodes
	// ErrFleetMismatch: the state records another node range than this
	// process was configured with (Options.FirstNode, LastNode).
	ErrFleetMismatch = lease.ErrFleetMismatch
	// ErrHistoryRolledBack: the state file went back (an older copy was
	// put back) while this process held a lease; the lease is lost, and
	// the history counts as unknown.
	ErrHistoryRolledBack = lease.ErrHistoryRolledBack
	// ErrUnsupported: this platform has no flock.
	ErrUnsupported = errors.New("statedir: node-ID claims need flock, which this platform lacks")
)

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
	d.secret, err = loadStateSecret(secretPath)
	if errors.Is(err, os.ErrNotExist) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err = d.locked(ctx, func(lock *os.File) error {
			var err error
			d.secret, err = loadStateSecret(secretPath)
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
			// secret without a fresh state file: unknown history, waited
			// out.)
			return d.writeFresh(lock)
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
