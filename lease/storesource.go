package lease

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/randflake/randflake"
)

// The constructors of a store module (etcdlease, pglease, kubelease, or
// one of your own) build their BlockStore from their own options and hand
// it here with the options every store-backed source shares, so that the
// fleet secret is checked, and the lease engine and the generator set up,
// in one place.

// StoreConfig is what a store module passes to the lease engine besides
// its store: the options every source on a BlockStore, and every
// generator on such a source, shares. NewStoreSource reads Name, Secret,
// Layout, Blocks, Horizon, Logger and Close; NewStoreLeased reads Name,
// Secret, Shards, OnError, Logger and Close.
type StoreConfig struct {
	// Name names the caller in errors, as its package does ("etcdlease"):
	// an error reads "etcdlease: …" (empty: "randflake").
	Name string
	// Secret is the fleet's 16-byte secret (the caller's Config.Secret),
	// the same as the generators'. Records and the marker are signed
	// under a key derived from it. No error shows it.
	Secret []byte
	// Layout divides the fleet's node IDs into blocks: the store's.
	Layout BlockLayout
	// Blocks is the number of consecutive blocks a claim takes (0: 1).
	Blocks int64
	// Horizon is the fleet's bound on promises (see
	// BlockSourceConfig.Horizon): the caller's default if it has one.
	Horizon time.Duration
	// Logger receives the lease engine's and the generator's events. Nil
	// logs nothing.
	Logger *slog.Logger
	// Shards and OnError are those of [randflake.LeasedConfig].
	Shards  int
	OnError func(error)
	// Close, if not nil, releases what the caller opened for the store
	// (pglease: a connection pool it opened from a DSN). NewStoreSource
	// and NewStoreLeased call it when they fail, and only then: on
	// success it stays open for the source's or the generator's life.
	Close func()
}

// StoreOpener makes a store module's BlockStore from the module's own
// Config, with the StoreConfig the engine runs it under: the one thing a
// module hands to OpenStoreSource and OpenStoreLeased.
type StoreOpener func() (BlockStore, StoreConfig, error)

// OpenStoreSource is a store module's New: it opens the store and returns
// the lease engine on it, as NewStoreSource does.
func OpenStoreSource(open StoreOpener) (*BlockSource, error) {
	st, cfg, err := open()
	if err != nil {
		return nil, err
	}
	return NewStoreSource(st, cfg)
}

// OpenStoreLeased is a store module's NewLeased: it opens the store, makes
// the lease engine on it under secret, and returns a generator on node IDs
// leased from it, waiting for the first lease as [randflake.NewLeased]
// does. The opener's StoreConfig.Secret is set to secret; a different one
// (a Config naming another secret than the one given) is refused, not
// guessed between.
func OpenStoreLeased(ctx context.Context, secret []byte, open StoreOpener) (*randflake.Leased, error) {
	st, cfg, err := open()
	if err != nil {
		return nil, err
	}
	if err := CheckLeasedSecret(cfg.Name, cfg.Secret, secret); err != nil {
		closeStore(cfg.Close)
		return nil, err
	}
	cfg.Secret = secret
	bs, err := NewStoreSource(st, cfg)
	if err != nil {
		return nil, err
	}
	return NewStoreLeased(ctx, bs, cfg)
}

// NewStoreSource returns the lease engine on store, a store module's
// source: it checks the secret (CheckStoreSecret) and makes the
// BlockSource. Its errors begin with cfg.Name; when it fails it calls
// cfg.Close.
func NewStoreSource(store BlockStore, cfg StoreConfig) (*BlockSource, error) {
	if err := CheckStoreSecret(cfg.Name, cfg.Secret); err != nil {
		closeStore(cfg.Close)
		return nil, err
	}
	bs, err := NewBlockSource(store, BlockSourceConfig{
		Secret:  cfg.Secret,
		Layout:  cfg.Layout,
		Blocks:  cfg.Blocks,
		Horizon: cfg.Horizon,
		Logger:  cfg.Logger,
	})
	if err != nil {
		closeStore(cfg.Close)
		return nil, fmt.Errorf("%s: %w", callerName(cfg.Name), err)
	}
	return bs, nil
}

// NewStoreLeased returns a generator on node IDs leased from src, a store
// module's source, under cfg.Secret (checked as NewStoreSource checks it). It
// waits for the first lease as [randflake.NewLeased] does; when it fails it
// calls cfg.Close.
func NewStoreLeased(ctx context.Context, src randflake.LeaseSource, cfg StoreConfig) (*randflake.Leased, error) {
	if err := CheckStoreSecret(cfg.Name, cfg.Secret); err != nil {
		closeStore(cfg.Close)
		return nil, err
	}
	g, err := randflake.NewLeased(ctx, randflake.LeasedConfig{
		Secret:  cfg.Secret,
		Source:  src,
		Shards:  cfg.Shards,
		OnError: cfg.OnError,
		Logger:  cfg.Logger,
	})
	if err != nil {
		closeStore(cfg.Close)
		return nil, err
	}
	return g, nil
}

// CheckLeasedSecret reports whether configured, a store module's
// Config.Secret, agrees with secret, the one its NewLeased was given:
// configured may be nil (NewLeased fills it in) or the same bytes; other
// bytes are an error that begins with name and shows neither secret.
// OpenStoreLeased calls it; a module that builds its generator itself
// (pglease) calls it before it opens anything.
func CheckLeasedSecret(name string, configured, secret []byte) error {
	if configured != nil && string(configured) != string(secret) {
		return fmt.Errorf("%s: NewLeased: Config.Secret differs from the secret given", callerName(name))
	}
	return nil
}

// CheckStoreSecret reports whether secret is a fleet secret: 16 bytes. The
// error, which wraps [randflake.ErrInvalidSecret], begins with name (the
// caller's package, "etcdlease") and says the length, never the secret.
// NewStoreSource and NewStoreLeased call it; a store module calls it itself
// only to refuse a secret before anything else.
func CheckStoreSecret(name string, secret []byte) error {
	if len(secret) == 16 {
		return nil
	}
	return &storeSecretError{name: callerName(name), n: len(secret)}
}

// callerName returns the name errors begin with.
func callerName(name string) string {
	if name == "" {
		return "randflake"
	}
	return name
}

// storeSecretError is a fleet secret of the wrong length.
type storeSecretError struct {
	name string // the caller
	n    int    // the secret's length
}

func (e *storeSecretError) Error() string {
	got := "is empty"
	if e.n > 0 {
		got = fmt.Sprintf("is %d bytes", e.n)
	}
	return fmt.Sprintf("%s: Config.Secret %s: want the fleet's 16-byte secret, which signs the records in the store", e.name, got)
}

// Is reports that the error is a randflake.ErrInvalidSecret.
func (e *storeSecretError) Is(target error) bool { return target == randflake.ErrInvalidSecret }

func closeStore(f func()) {
	if f != nil {
		f()
	}
}
