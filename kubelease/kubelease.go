// Package kubelease hands out Randflake node IDs to the pods of a
// Deployment through Kubernetes Lease objects (coordination.k8s.io/v1),
// the API server's own leases, which every cluster already runs: no two
// processes use a node ID at the same time, and none reuses a second
// another may have used on it. It needs no StatefulSet and no store of its
// own, so a HorizontalPodAutoscaler may scale the fleet freely.
//
// The package is a storage layer only. The rules that make leases safe
// (where a lease starts, the promises recorded before seconds are used,
// unknown or rolled-back history waited out, clocks behind a block's
// record) live in the lease engine, lease.BlockSource; [Store] is the
// lease.BlockStore it runs on, and [Source] is the engine on that
// store. docs/leases.md states the rules.
//
// # Objects
//
// The node IDs FirstNode..LastNode are divided into blocks of Config.Nodes
// node IDs; a process claims one block. In the namespace, each carrying
// the label randflake.io/fleet=NAME (Config.Name, "randflake" by default):
//
//	NAME          the fleet object, a Lease never held: its annotation
//	              randflake.io/marker holds the engine's fleet marker (the
//	              layout, the store identity it was written on, the
//	              longest promise, the second up to which history is
//	              unknown, a digest of every record), and, between a
//	              step's commit and its last write, randflake.io/pending
//	NAME-NNNNNN   the Lease of the block from node ID NNNNNN: its claim
//	              (spec.holderIdentity: the pod's name and UID and a
//	              random token of the claim; acquireTime, renewTime,
//	              leaseDurationSeconds = the TTL) and, in the annotation
//	              randflake.io/record, the block's record: the newest
//	              second any holder may have put in an ID on it
//
// The marker and the records are written by the engine, signed under a
// key derived from the fleet secret (Config.Secret), and kept verbatim: an
// annotation edited by hand fails the engine's check, and a record
// deleted, edited or put back from an older copy no longer matches the
// marker's digest. Either is unknown history, waited out.
//
// # Steps
//
// The API server has no transaction over several objects; the fleet
// object is the commit point of every step instead. A step (a claim, a
// recorded promise, a release, a history reset) lists the fleet's Lease
// objects (one list, answered from one revision of etcd), calls the
// engine, then:
//
//  1. claims its blocks, each a create of the block's Lease or an update
//     conditioned on the resource version listed (a block another process
//     claimed or renewed meanwhile is refused with lease.ErrBlockHeld);
//  2. commits: one update of the fleet object, conditioned on its resource
//     version listed, that writes the new marker and, as a pending step,
//     the records and releases to write to the blocks' objects. If another
//     step committed first, the claims of step 1 are freed and the step
//     runs again on a new list;
//  3. writes the pending records and releases to the blocks' objects and
//     removes the pending step from the fleet object.
//
// Every step lists before it commits, and writes out a pending step it
// finds (each block's object records the commit it last took, so a write
// is done once and never after a later commit's) before it reads
// anything: every step sees the store as the commits left it, and a
// process that dies between 2 and 3 leaves nothing half done. A claim of
// step 1 whose step does not commit lasts at most a TTL, and nothing was
// issued on it.
//
// # Time
//
// Lease times are written by the clients, so the claim's expiry is
// decided on clocks: a block is free to claim when its holder's renewTime
// plus leaseDurationSeconds has passed on the claimant's clock. Every
// claim, every recorded promise and every renewal checks this machine's
// clock against the API server's, its Date header, and fails with
// ErrClockSkew when they differ by more than K = Config.MaxClockSkew. The
// Date header counts whole seconds, so a clock that passes the check is
// within K + 1 s of the server's, and two holders' clocks within
// 2(K + 1 s) of each other. A renewal begun at t0 writes renewTime
// at t0 or later; a claimant takes the block over only when its clock
// passes renewTime + TTL, when the holder's clock reads at least
// t0 + TTL - 2(K + 1 s). The holder's lease therefore ends at the last
// whole second that ends a margin (a tenth of the TTL, at least 200 ms)
// before that:
//
//	End = floor(t0 + TTL - 2(MaxClockSkew + 1 s) - margin) - 1
//
// With the defaults (TTL 15 s, MaxClockSkew 1 s) a lease runs about 9.5 s
// past each renewal, and a holder cut off from the API server stops
// issuing about 5.5 s before its claim can pass on. The promise (how far
// ahead a holder records the seconds it may use) is one TTL, so a crashed
// holder's blocks are taken over one TTL after its last renewal, its last
// promise then passed to within a second. Unknown history (the objects
// deleted, a namespace recreated, a marker edited) is waited out for the
// promise plus 2(K + 1 s): 19 s with the defaults.
//
// # History that goes back
//
// The store's identity is the fleet object's UID; its position is the
// resource version of the API server's answers (a list's, or an update's),
// which is etcd's revision and never goes back while etcd keeps its
// history. So:
//
//   - the Lease objects deleted (kubectl delete leases -l
//     randflake.io/fleet=NAME, a namespace deleted and created again): the
//     fleet object is gone, history unknown, waited out once; a holder
//     whose object was deleted loses its claim at its next renewal.
//   - the objects put back from a backup (a namespace restored by a backup
//     tool): the restored fleet object has a new UID, which the marker
//     does not name: history unknown.
//   - etcd restored from a snapshot under the API server: the resource
//     versions go back; a running holder sees it at its next renewal or
//     step (or finds its claim gone together with the lower revision),
//     drops its claim with lease.ErrHistoryRolledBack, and marks the
//     history unknown. Restart the API servers after such a restore, as
//     Kubernetes asks: their caches still hold the later revisions.
//
// What cannot be detected is an etcd restore that no running holder sees
// before a claim is made (no holder runs, or a claim is made before every
// holder's next renewal). After such a restore, run Source.ResetHistory
// (randflake lease reset-history) before starting the fleet.
//
// # Access
//
// The processes need get, list, create, update and delete on
// leases.coordination.k8s.io in the namespace (a Role and a RoleBinding);
// a refusal is an error wrapping ErrForbidden that names the verb, the
// resource and the namespace. In a pod, InCluster reads the service
// account's token (again every minute: it is rotated), the cluster's CA
// and the namespace; elsewhere LoadKubeconfig reads the current context of
// a kubeconfig file, for users with a token or a client certificate.
//
// # Weight
//
// The client is plain net/http with small JSON structs of this package's
// own for Lease, LeaseList and Status, and sigs.k8s.io/yaml for kubeconfig
// files: no k8s.io/client-go, whose cold build costs several times the
// whole randflake command's (docs/operations.md gives the measured
// figures).
//
// # Assumptions
//
//   - The API server is backed by etcd (resource versions are its
//     revisions, numbers that grow with every write) and answers lists
//     without a resourceVersion parameter from its latest revision, as it
//     does by default.
//   - The clocks of the holders and of the API server differ by at most
//     MaxClockSkew (checked at every claim, promise and renewal), and no
//     holder's clock steps back while it runs.
//   - Every process of the fleet uses the same namespace, name, secret,
//     node range, Nodes and TTL, and nothing else writes the fleet's
//     objects but an operator.
package kubelease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/randflake/randflake"
	"github.com/randflake/randflake/lease"
)

// Defaults of Config.
const (
	DefaultName         = "randflake"      // the fleet's name, and its object's
	DefaultNodes        = 16               // node IDs per block: 2 million IDs per second
	DefaultTTL          = 15 * time.Second // leaseDurationSeconds
	DefaultMaxClockSkew = time.Second      // bound on a holder's clock against the API server's
	// MinTTL is the shortest TTL.
	MinTTL = 3 * time.Second
	// MaxTTL is the longest TTL.
	MaxTTL = time.Hour
	// DefaultHorizon is the fleet's bound on promises (Config.Horizon):
	// the promise of DefaultTTL, one TTL.
	DefaultHorizon = DefaultTTL
)

// Config configures a Source.
type Config struct {
	// Client is the connection to the API server (InCluster,
	// LoadKubeconfig or NewClient).
	Client *Client
	// Namespace holds the Lease objects (empty: the client's namespace,
	// the pod's own in a cluster).
	Namespace string
	// Name names the fleet: its object, the prefix of its blocks'
	// objects and the value of their randflake.io/fleet label
	// (DefaultName if empty). A DNS label of at most 56 characters.
	Name string
	// Secret is the fleet's 16-byte secret, the same as the generators'.
	// Records and the marker are signed under a key derived from it.
	// Required by New; NewLeased sets it from its argument. It is never
	// written to the API server nor logged.
	Secret []byte
	// Nodes is the number of node IDs in a block, which a process claims
	// (0: DefaultNodes). It must divide the range FirstNode..LastNode;
	// every process of the fleet uses the same.
	Nodes int64
	// FirstNode and LastNode bound the node IDs the fleet uses. Zero for
	// both means all of them, 0 to 131071.
	FirstNode, LastNode int64
	// Holder describes this process in its claims (default: the pod's
	// name and UID from the POD_NAME and POD_UID variables, which the
	// manifests set from the downward API; else the host name and
	// process ID).
	Holder string
	// TTL is the claims' leaseDurationSeconds, in whole seconds (0:
	// DefaultTTL). It must leave room for the clock allowances: 2 x
	// (MaxClockSkew + 1 s) plus a tenth of the TTL must not exceed half
	// the TTL.
	TTL time.Duration
	// Horizon is the fleet's bound on promises: the longest TTL any
	// member of the fleet may use, the same on every member (0:
	// DefaultHorizon, the default TTL). A process whose TTL is longer is
	// refused, naming both: after the Lease objects are deleted every
	// member waits out unknown history for Horizon and the clock
	// allowances only. To lengthen TTLs, raise Horizon on every member
	// first (rule 13 of docs/leases.md).
	Horizon time.Duration
	// MaxClockSkew bounds the difference between this machine's clock
	// and the API server's (0: DefaultMaxClockSkew).
	MaxClockSkew time.Duration

	// Shards, OnError and Logger are passed to randflake.LeasedConfig by
	// NewLeased. Logger also receives the lease engine's events. Nil logs
	// nothing.
	Shards  int
	OnError func(error)
	Logger  *slog.Logger
}

// dnsLabel reports whether s is a DNS label (RFC 1123) of at most n
// characters.
func dnsLabel(s string, n int) bool {
	if s == "" || len(s) > n || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for _, r := range s {
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '-' {
			return false
		}
	}
	return true
}

// defaultHolder describes this process: the pod's name and UID, if the
// downward API gave them, else the host name and process ID.
func defaultHolder() string {
	if name, uid := os.Getenv("POD_NAME"), os.Getenv("POD_UID"); name != "" {
		if uid != "" {
			return name + " uid " + uid
		}
		return name
	}
	h, _ := os.Hostname()
	return strings.TrimSpace(fmt.Sprintf("%s pid %d", h, os.Getpid()))
}

// normalize returns cfg with its defaults filled in, or why it is unusable.
func (cfg Config) normalize() (Config, error) {
	if cfg.Client == nil {
		return cfg, errors.New("kubelease: Config.Client is nil")
	}
	if cfg.Namespace == "" {
		cfg.Namespace = cfg.Client.Namespace()
	}
	if cfg.Namespace == "" {
		return cfg, errors.New("kubelease: no namespace: set one (--kube-namespace) or use a kubeconfig context or service account that names one")
	}
	if !dnsLabel(cfg.Namespace, 63) {
		return cfg, fmt.Errorf("kubelease: namespace %q: want a DNS label (lower-case letters, digits and '-')", cfg.Namespace)
	}
	if cfg.Name == "" {
		cfg.Name = DefaultName
	}
	if !dnsLabel(cfg.Name, 56) {
		return cfg, fmt.Errorf("kubelease: fleet name %q: want a DNS label of at most 56 characters", cfg.Name)
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.TTL < MinTTL || cfg.TTL > MaxTTL || cfg.TTL%time.Second != 0 {
		return cfg, fmt.Errorf("kubelease: TTL %v: want whole seconds from %v to %v", cfg.TTL, MinTTL, MaxTTL)
	}
	if cfg.MaxClockSkew == 0 {
		cfg.MaxClockSkew = DefaultMaxClockSkew
	}
	if cfg.MaxClockSkew < 0 || 2*known(cfg.MaxClockSkew)+margin(cfg.TTL) > cfg.TTL/2 {
		return cfg, fmt.Errorf("kubelease: MaxClockSkew %v with TTL %v: 2 x (MaxClockSkew + 1s) + %v must not exceed half the TTL",
			cfg.MaxClockSkew, cfg.TTL, margin(cfg.TTL))
	}
	if cfg.Horizon == 0 {
		cfg.Horizon = DefaultHorizon
	}
	if cfg.Horizon < 0 || cfg.Horizon > MaxTTL {
		return cfg, fmt.Errorf("kubelease: horizon %v: want 0 to %v", cfg.Horizon, MaxTTL)
	}
	cfg.Horizon = (cfg.Horizon + time.Second - 1) / time.Second * time.Second
	l, err := lease.NewBlockLayout(cfg.FirstNode, cfg.LastNode, cfg.Nodes, DefaultNodes)
	if err != nil {
		return cfg, fmt.Errorf("kubelease: %w", err)
	}
	cfg.FirstNode, cfg.LastNode, cfg.Nodes = l.FirstNode, l.LastNode, l.Size
	if cfg.Holder == "" {
		cfg.Holder = defaultHolder()
	}
	return cfg, nil
}

// Source is a randflake.LeaseSource on Kubernetes Lease objects: the lease
// engine (lease.BlockSource) on a Store. It holds at most one lease at a
// time; use one Source per generator. It is safe for concurrent use.
//
// Its ResetHistory marks the history of every block unknown, so that the
// next claims wait out the horizon: the operator's tool after an etcd
// restore that cannot be detected (see the package documentation).
type Source = lease.BlockSource

// New returns a lease source on Kubernetes Lease objects. Config.Secret is
// required: the fleet's 16 bytes.
func New(cfg Config) (*Source, error) { return lease.OpenStoreSource(cfg.open) }

// NewLeased returns a generator on node IDs claimed through Lease objects,
// under the fleet's secret, which also signs the records: Config.Secret may
// be left empty, and one that differs from secret is an error.
func NewLeased(ctx context.Context, secret []byte, cfg Config) (*randflake.Leased, error) {
	return lease.OpenStoreLeased(ctx, secret, cfg.open)
}
