// Package etcdlease hands out Randflake node IDs to the processes of a
// fleet through etcd, a coordination service the fleet already runs, so
// that no node ID is used by two processes in the same second.
//
// The package is a store of the lease engine: [Store] is a
// lease.BlockStore, which keeps claims and history in etcd, and [New]
// wraps it in a lease.BlockSource, which applies the engine's rules
// (docs/leases.md, "The rules"): a lease starts after the last second its
// node IDs may have been used, a holder records a promise before it uses a
// second, history that cannot be seen is waited out, a store that went back
// in time is history lost, a clock behind a block's record refuses that
// block only.
//
// # Keys
//
// The node IDs FirstNode..LastNode are divided into blocks of Config.Nodes
// node IDs; a process claims one block. Under the key prefix:
//
//	PREFIX marker          the fleet marker: the layout of the blocks, the
//	                       etcd cluster ID it was written on, the longest
//	                       promise, the second up to which history is
//	                       unknown, and a digest of every record
//	PREFIX record/NNNNNN   the record of the block from node ID NNNNNN:
//	                       the newest second any holder may have put in an
//	                       ID on it; no etcd lease, so it outlives holders
//	PREFIX claim/NNNNNN    the claim on that block, attached to its
//	                       holder's etcd lease; its value names the holder
//	                       (Config.Holder), the etcd lease and a random token
//
// The marker and the records are written by the engine, signed under a key
// derived from the fleet secret (Config.Secret); the store stores them as
// they are. Each step of the engine is one read of these keys at a single
// etcd revision, then one transaction that applies the step only if the
// marker (and every record written) has not changed since, no claim key
// exists in a block being claimed, and the held claim's keys are still this
// process's. A claim that turns out to be held is refused; one whose keys
// are gone is lost (randflake.ErrLeaseLost). Any claim key in a block's
// range of node IDs holds the block, so that a process configured with
// other blocks, or one of an earlier release (which wrote a claim key per
// node ID and used/NNNNNN keys, ignored now), never shares a node ID with
// this one; a key among the claims that names no node ID is refused
// (ErrCorrupt).
//
// # Time
//
// A claim's etcd lease is granted for Config.TTL when the claim is made.
// Each renewal sends one keep-alive at time t0; if it succeeds, the etcd
// lease cannot expire, and nobody else can claim the block, before t0 +
// TTL. The lease ends at the last whole second that ends a margin (a tenth
// of the TTL, at least 200 ms) before then, so a process cut off from etcd
// stops issuing IDs before anyone else could claim its node IDs. Before the
// lease may run past the block's record, the holder records a new promise,
// Config.Promise (three TTLs by default) ahead of its clock. A clean release
// records the newest second used and deletes the claim key in one
// transaction, then revokes the etcd lease: the block is free at once, and
// the next holder starts right after that second. After a crash the claim
// disappears with its etcd lease, a TTL after the last keep-alive, and the
// next holder starts after the crashed holder's promise (the engine prefers
// blocks whose seconds have passed, so that costs a wait only when no other
// block is free).
//
// # What lost history costs
//
// The store never reports a prefix as fresh: a prefix without a marker
// cannot be told from one whose keys were deleted. So the first claim
// under a new prefix, on the very first start of a fleet, waits out the
// horizon once (Config.Horizon + MaxClockSkew, rounded up to whole
// seconds: 31 s with the defaults; a member whose Promise is longer than
// Horizon is refused, so that the wait covers every member's promise even
// after the marker is wiped) and records the marker; later claimants read the
// marker and wait no longer than it says. The same wait, for the claims
// made before it has passed, follows:
//
//   - the keys deleted (etcdctl del --prefix, an operator cleaning up
//     claims): the marker is gone, or the records no longer match its
//     digest. A holder whose claim key was deleted issues no second past
//     the promise it had recorded, loses its claim at its next write and
//     claims again.
//   - a record edited, deleted or replaced by an older one, even a validly
//     signed one: the digest no longer matches.
//   - etcd restored from a snapshot under a new cluster ID (etcdctl
//     snapshot restore with another initial cluster token or members):
//     the marker names another cluster. Holders see the new cluster ID at
//     their next keep-alive and claim again.
//   - etcd restored under the same cluster ID while a holder runs: the
//     holder sees the revision go back at its next keep-alive or write
//     (or, if its etcd lease is not in the snapshot, finds its lease gone
//     together with the lower revision), marks the whole history unknown,
//     and claims again; claims made after that wait.
//
// A claim the snapshot holds comes back with it: etcd gives every restored
// lease a full TTL, so that block stays held for a TTL after the restore.
//
// What cannot be detected is a restore under the same cluster ID that no
// running holder sees before a claim is made: no holder runs, or a claim
// is made between the restore and the next keep-alive of every holder that
// runs (at most a third of the TTL, plus the keep-alive's own time). The
// keyspace then looks exactly like one that was never written since the
// snapshot, and a block free in the snapshot is claimed at once. After
// such a restore, run Source.ResetHistory (randflake lease reset-history)
// before starting the fleet: the next claims wait out the horizon once.
//
// # Assumptions
//
//   - etcd is linearizable (the default) and its leases expire no earlier
//     than TTL after the keep-alive that renewed them, measured by a clock
//     that runs at the same rate as the holder's (etcd only ever extends
//     leases, for example on leader change or restart).
//   - Uniqueness does not rest on clocks agreeing: a holder only uses
//     seconds it has promised, and its successor starts after the promise.
//     The time bound (stopping before the claim can pass on) assumes the
//     holder's clock does not step back while it runs. Waiting out unknown
//     history assumes the clocks of the fleet's machines differ by less
//     than Config.MaxClockSkew (1 s by default): a dead holder's promise
//     was made on its clock.
//   - Every process of the fleet uses the same prefix, secret, node range,
//     Nodes and Horizon (a member with another secret is refused, and one
//     whose Promise passes Horizon too), and nothing else writes under
//     the prefix but an operator. etcd's history is compacted, as in any
//     production etcd: each claim, promise and release is a write.
package etcdlease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/randflake/randflake"
	"github.com/randflake/randflake/lease"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Defaults of Config.
const (
	DefaultPrefix       = "/randflake/"    // key prefix of the fleet
	DefaultNodes        = 16               // node IDs per block: 2 million IDs per second
	DefaultTTL          = 10 * time.Second // etcd lease time to live
	DefaultMaxClockSkew = time.Second      // how far the fleet's clocks may differ
	// DefaultHorizon is the fleet's bound on promises: the promise of
	// DefaultTTL (three TTLs).
	DefaultHorizon = 3 * DefaultTTL
)

// MaxTTL is the longest Config.TTL. Config.Promise may be up to three
// times as long, Config.MaxClockSkew as long.
const MaxTTL = 24 * time.Hour

// ceilSecond rounds d up to whole seconds.
func ceilSecond(d time.Duration) time.Duration {
	return (d + time.Second - 1) / time.Second * time.Second
}

// MaxNodes was the largest claim when a claim wrote one key per node ID.
//
// Deprecated: a claim is now one key whatever the size of its block; a
// block may hold up to every node ID of the range.
const MaxNodes = randflake.MaxNode + 1

// Config configures a Source.
type Config struct {
	// Client is the etcd client. The Source does not close it.
	Client *clientv3.Client
	// Prefix is the key prefix of the fleet (DefaultPrefix if empty).
	Prefix string
	// Secret is the fleet's 16-byte secret, the same as the generators'.
	// The records and the marker are signed under a key derived from it.
	// New requires it; NewLeased sets it from its argument. It is never
	// written to etcd nor logged.
	Secret []byte
	// Nodes is the number of node IDs in a block, which is what a process
	// claims (0: DefaultNodes). Each node ID issues up to 131,072 IDs per
	// second. It must divide the range FirstNode..LastNode; every process
	// of the fleet uses the same (the marker records it, and a process
	// configured otherwise is refused with lease.ErrFleetMismatch).
	Nodes int64
	// FirstNode and LastNode bound the node IDs the fleet uses. Zero for
	// both means all of them, 0 to 131071.
	FirstNode, LastNode int64
	// TTL is the etcd lease's time to live, in whole seconds, at least 3s
	// (0: DefaultTTL). A crashed process's node IDs are free again one TTL
	// after its last keep-alive; a process cut off from etcd stops issuing
	// after about 0.9 TTL.
	TTL time.Duration
	// Promise is how far ahead of the clock a holder records the seconds
	// it may use, in whole seconds (0: three TTLs; at least one TTL).
	// Longer means fewer etcd writes; shorter means a claimant waits less
	// for node IDs whose holder crashed, when no other node IDs are free,
	// and after lost history.
	Promise time.Duration
	// Horizon is the fleet's bound on promises: the longest Promise any
	// member of the fleet may use, the same on every member (0:
	// DefaultHorizon, the promise of the default TTL). A process whose
	// Promise is longer is refused, naming both: after a wipe of the
	// prefix every member waits out unknown history for Horizon +
	// MaxClockSkew only, so a longer promise could still be running then.
	// To lengthen TTLs, raise Horizon on every member first, then the
	// TTLs; to shorten them, shorten the TTLs first and lower Horizon only
	// a Horizon after the last longer promise was made (rule 13 of
	// docs/leases.md).
	Horizon time.Duration
	// MaxClockSkew is how far the clocks of the fleet's machines may
	// differ (0: DefaultMaxClockSkew). Lost history is waited out this
	// much longer than the promise, and a block whose record was written
	// at a time more than this ahead of the clock is refused.
	MaxClockSkew time.Duration
	// Holder describes this process in its claims (default: host name and
	// process ID).
	Holder string

	// Shards, OnError and Logger are passed to randflake.LeasedConfig by
	// NewLeased. Logger also receives the lease engine's events: history
	// found unknown or gone back (with the reason and the wait), waits for
	// a previous holder's seconds, blocks refused for their clock. Nil
	// logs nothing.
	Shards  int
	OnError func(error)
	Logger  *slog.Logger
}

// normalize returns cfg with its defaults filled in, or why it is unusable.
func (cfg Config) normalize() (Config, error) {
	if cfg.Client == nil {
		return cfg, errors.New("etcdlease: Config.Client is nil")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	l, err := lease.NewBlockLayout(cfg.FirstNode, cfg.LastNode, cfg.Nodes, DefaultNodes)
	if err != nil {
		return cfg, fmt.Errorf("etcdlease: %w", err)
	}
	cfg.FirstNode, cfg.LastNode, cfg.Nodes = l.FirstNode, l.LastNode, l.Size
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.TTL < 0 || cfg.TTL > MaxTTL {
		return cfg, fmt.Errorf("etcdlease: TTL %v: want 3s to %v", cfg.TTL, MaxTTL)
	}
	if cfg.TTL = ceilSecond(cfg.TTL); cfg.TTL < 3*time.Second {
		return cfg, fmt.Errorf("etcdlease: TTL %v: want at least 3s", cfg.TTL)
	}
	if cfg.Promise < 0 || cfg.Promise > 3*MaxTTL {
		return cfg, fmt.Errorf("etcdlease: promise %v: want 0 to %v", cfg.Promise, 3*MaxTTL)
	}
	if cfg.Promise == 0 {
		cfg.Promise = 3 * cfg.TTL
	}
	cfg.Promise = max(ceilSecond(cfg.Promise), cfg.TTL)
	if cfg.Horizon < 0 || cfg.Horizon > 3*MaxTTL {
		return cfg, fmt.Errorf("etcdlease: horizon %v: want 0 to %v", cfg.Horizon, 3*MaxTTL)
	}
	if cfg.Horizon == 0 {
		cfg.Horizon = DefaultHorizon
	}
	cfg.Horizon = ceilSecond(cfg.Horizon)
	if cfg.MaxClockSkew < 0 || cfg.MaxClockSkew > MaxTTL {
		return cfg, fmt.Errorf("etcdlease: clock skew %v: want 0 to %v", cfg.MaxClockSkew, MaxTTL)
	}
	if cfg.MaxClockSkew == 0 {
		cfg.MaxClockSkew = DefaultMaxClockSkew
	}
	if cfg.Holder == "" {
		h, _ := os.Hostname()
		cfg.Holder = fmt.Sprintf("%s pid %d", h, os.Getpid())
	}
	return cfg, nil
}

// Source is a randflake.LeaseSource on etcd: the lease engine
// (lease.BlockSource) on a Store. It holds at most one lease at a time;
// use one Source per generator. It is safe for concurrent use.
//
// Its ResetHistory marks the history of every block unknown, so that the
// next claims wait out the horizon: the operator's tool after an etcd
// restore that cannot be detected (see the package documentation).
type Source = lease.BlockSource

// New returns a lease source on etcd. Config.Secret is required: the
// fleet's 16 bytes.
func New(cfg Config) (*Source, error) { return lease.OpenStoreSource(cfg.open) }

// NewLeased returns a generator on node IDs claimed from etcd, under the
// fleet's secret, which also signs the records: Config.Secret may be left
// empty, and one that differs from secret is an error.
func NewLeased(ctx context.Context, secret []byte, cfg Config) (*randflake.Leased, error) {
	return lease.OpenStoreLeased(ctx, secret, cfg.open)
}
