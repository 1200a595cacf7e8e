package pglease_test

import (
	"context"
	"log"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/randflake/randflake"
	"github.com/randflake/randflake/pglease"
)

// A fleet member claims 16 node IDs in PostgreSQL (up to 2 million IDs per
// second), renewed for as long as it runs and released on Close. The
// tables are created once, explicitly, by Migrate.
func ExampleNewLeased() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL")) // postgres://user:password@db:5432/app
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if err := pglease.Migrate(ctx, pool); err != nil {
		log.Fatal(err)
	}
	secret := []byte("fleet-secret-16b") // the same on every member
	g, err := pglease.NewLeased(ctx, secret, pglease.Config{
		Pool:    pool,
		Nodes:   16,
		Logger:  slog.Default(),
		OnError: func(err error) { log.Print(err) },
	})
	if err != nil {
		log.Fatal(err)
	}
	defer func() {
		// The release, bounded in case the database is down, lets the
		// next process take the node IDs over at once.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		g.Close(ctx)
	}()
	id, err := g.Generate()
	if err != nil {
		log.Fatal(err)
	}
	log.Print(randflake.EncodeString(id))
}

// The source alone, on a table of its own in a schema of the
// application, for a generator configured by hand.
func ExampleNew() {
	ctx := context.Background()
	var pool *pgxpool.Pool // connected to PostgreSQL
	if err := pglease.MigrateTable(ctx, pool, "myapp", "randflake_blocks"); err != nil {
		log.Fatal(err)
	}
	secret := []byte("fleet-secret-16b") // the same on every member
	src, err := pglease.New(pglease.Config{
		Pool:         pool,
		Secret:       secret,
		Schema:       "myapp",
		TTL:          15 * time.Second,
		Horizon:      15 * time.Second, // every member's: the longest TTL of the fleet
		MaxClockSkew: 2 * time.Second,  // clocks kept by NTP, with room to spare
	})
	if err != nil {
		log.Fatal(err)
	}
	g, err := randflake.NewLeased(ctx, randflake.LeasedConfig{
		Secret: secret,
		Source: src,
		Shards: 4,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer g.Close(ctx)
}

// After a copy of the database (or of the two tables) was restored under
// the same system identifier and timeline while no process ran, which
// nothing can detect, the operator marks the history unknown before the
// fleet starts again: the next claims wait out the longest promise (TTL +
// MaxClockSkew), so none reuses a second a lost holder may have used.
func ExampleSource_ResetHistory() {
	ctx := context.Background()
	src, err := pglease.New(pglease.Config{
		DSN:    os.Getenv("DATABASE_URL"),
		Secret: []byte("fleet-secret-16b"),
	})
	if err != nil {
		log.Fatal(err)
	}
	defer src.Close()
	if err := src.ResetHistory(ctx); err != nil {
		log.Fatal(err)
	}
}
