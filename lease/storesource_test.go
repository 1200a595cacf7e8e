package lease_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strings"
	"testing"
	"time"

	"github.com/randflake/randflake"
	"github.com/randflake/randflake/lease"
)

// A store module's New: its own options make the store, and the shared ones
// go to NewStoreSource, which checks the secret and sets up the engine.
func ExampleNewStoreSource() {
	open := func(secret []byte) (*lease.BlockSource, error) {
		st, err := lease.NewStaticStore(0, 15, time.Second) // your BlockStore
		if err != nil {
			return nil, err
		}
		return lease.NewStoreSource(st, lease.StoreConfig{
			Name:   "mystore",
			Secret: secret,
			Layout: lease.StaticLayout(0, 15),
		})
	}
	if _, err := open([]byte("fleet-secret-16b")); err != nil {
		log.Fatal(err)
	}
	_, err := open([]byte("too short"))
	fmt.Println(err)
	// Output:
	// mystore: Config.Secret is 9 bytes: want the fleet's 16-byte secret, which signs the records in the store
}

func TestStoreSourceSecret(t *testing.T) {
	st, err := lease.NewStaticStore(0, 15, 0)
	if err != nil {
		t.Fatal(err)
	}
	layout := lease.StaticLayout(0, 15)
	secret := "fleet-secret-16b"
	for _, c := range []struct {
		secret []byte
		want   string
	}{
		{nil, "teststore: Config.Secret is empty: want the fleet's 16-byte secret"},
		{[]byte{}, "teststore: Config.Secret is empty"},
		{[]byte(secret[:15]), "teststore: Config.Secret is 15 bytes: want the fleet's 16-byte secret"},
		{[]byte(secret + "x"), "teststore: Config.Secret is 17 bytes"},
	} {
		closed := 0
		_, err := lease.NewStoreSource(st, lease.StoreConfig{Name: "teststore", Secret: c.secret, Layout: layout,
			Close: func() { closed++ }})
		if err == nil || !strings.HasPrefix(err.Error(), c.want) || !errors.Is(err, randflake.ErrInvalidSecret) {
			t.Errorf("a secret of %d bytes: %v, want %q wrapping ErrInvalidSecret", len(c.secret), err, c.want)
		} else if len(c.secret) > 0 && strings.Contains(err.Error(), string(c.secret[:8])) {
			t.Errorf("the error shows the secret: %v", err)
		}
		if closed != 1 {
			t.Errorf("a secret of %d bytes: Close called %d times, want once", len(c.secret), closed)
		}
		if err2 := lease.CheckStoreSecret("teststore", c.secret); err2 == nil || err2.Error() != err.Error() {
			t.Errorf("CheckStoreSecret: %v, want %v", err2, err)
		}
	}
	if err := lease.CheckStoreSecret("", nil); err == nil || !strings.HasPrefix(err.Error(), "randflake: ") {
		t.Errorf("CheckStoreSecret without a name: %v, want it to begin with randflake:", err)
	}

	// The engine's own refusals name the caller too, and close.
	closed := 0
	_, err = lease.NewStoreSource(st, lease.StoreConfig{Name: "teststore", Secret: []byte(secret),
		Layout: lease.BlockLayout{FirstNode: 0, LastNode: 15, Size: 3}, Close: func() { closed++ }})
	if err == nil || !strings.HasPrefix(err.Error(), "teststore: ") || closed != 1 {
		t.Errorf("a bad layout: %v (closed %d times), want an error naming teststore and one Close", err, closed)
	}

	// Success closes nothing.
	closed = 0
	bs, err := lease.NewStoreSource(st, lease.StoreConfig{Name: "teststore", Secret: []byte(secret), Layout: layout,
		Close: func() { closed++ }})
	if err != nil || closed != 0 {
		t.Fatalf("NewStoreSource: %v (closed %d times)", err, closed)
	}
	if bs.Store() != st {
		t.Error("the source is not on the store given")
	}
}

func TestStoreLeased(t *testing.T) {
	st, err := lease.NewStaticStore(0, 15, 0)
	if err != nil {
		t.Fatal(err)
	}
	secret := []byte("fleet-secret-16b")
	bs, err := lease.NewStoreSource(st, lease.StoreConfig{Name: "teststore", Secret: secret, Layout: lease.StaticLayout(0, 15)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	closed := 0
	if _, err := lease.NewStoreLeased(ctx, bs, lease.StoreConfig{Name: "teststore", Secret: secret[:8], Close: func() { closed++ }}); err == nil ||
		!strings.HasPrefix(err.Error(), "teststore: Config.Secret is 8 bytes") || closed != 1 {
		t.Errorf("an 8-byte secret: %v (closed %d times), want it refused naming teststore, and one Close", err, closed)
	}
	dead, cancelDead := context.WithCancel(ctx)
	cancelDead()
	closed = 0
	if _, err := lease.NewStoreLeased(dead, bs, lease.StoreConfig{Name: "teststore", Secret: secret, Close: func() { closed++ }}); err == nil || closed != 1 {
		t.Errorf("a cancelled context: %v (closed %d times), want an error and one Close", err, closed)
	}

	closed = 0
	g, err := lease.NewStoreLeased(ctx, bs, lease.StoreConfig{Name: "teststore", Secret: secret, Shards: 2, Close: func() { closed++ }})
	if err != nil || closed != 0 {
		t.Fatalf("NewStoreLeased: %v (closed %d times)", err, closed)
	}
	defer g.Close(ctx)
	if _, err := g.Generate(); err != nil {
		t.Fatal(err)
	}
}

// A store module's New and NewLeased: one opener makes the store from the
// module's own Config and says how the engine runs on it.
func ExampleOpenStoreLeased() {
	open := func() (lease.BlockStore, lease.StoreConfig, error) {
		st, err := lease.NewStaticStore(0, 15, 0) // your BlockStore
		if err != nil {
			return nil, lease.StoreConfig{}, err
		}
		return st, lease.StoreConfig{Name: "mystore", Layout: lease.StaticLayout(0, 15)}, nil
	}
	ctx := context.Background()
	g, err := lease.OpenStoreLeased(ctx, []byte("fleet-secret-16b"), open)
	if err != nil {
		log.Fatal(err)
	}
	defer g.Close(ctx)
	fmt.Println(g.Lease().FirstNode, g.Lease().LastNode)
	// Output:
	// 0 15
}

func TestOpenStore(t *testing.T) {
	secret := []byte("fleet-secret-16b")
	var opened, closed int
	opener := func(cfg lease.StoreConfig, fail error) lease.StoreOpener {
		return func() (lease.BlockStore, lease.StoreConfig, error) {
			opened++
			if fail != nil {
				return nil, lease.StoreConfig{}, fail
			}
			st, err := lease.NewStaticStore(0, 15, 0)
			if err != nil {
				t.Fatal(err)
			}
			cfg.Name, cfg.Layout, cfg.Close = "teststore", lease.StaticLayout(0, 15), func() { closed++ }
			return st, cfg, nil
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// The opener's error is returned as it is, and nothing else runs.
	refused := errors.New("teststore: Config.Nodes is 0")
	if _, err := lease.OpenStoreSource(opener(lease.StoreConfig{Secret: secret}, refused)); err != refused {
		t.Errorf("OpenStoreSource with a failing opener: %v, want %v", err, refused)
	}
	if _, err := lease.OpenStoreLeased(ctx, secret, opener(lease.StoreConfig{}, refused)); err != refused {
		t.Errorf("OpenStoreLeased with a failing opener: %v, want %v", err, refused)
	}

	// OpenStoreSource checks the opener's secret as NewStoreSource does.
	opened, closed = 0, 0
	if _, err := lease.OpenStoreSource(opener(lease.StoreConfig{Secret: secret[:8]}, nil)); !errors.Is(err, randflake.ErrInvalidSecret) ||
		!strings.HasPrefix(err.Error(), "teststore: Config.Secret is 8 bytes") || opened != 1 || closed != 1 {
		t.Errorf("OpenStoreSource with an 8-byte secret: %v (opened %d, closed %d times), want ErrInvalidSecret naming teststore, one open and one Close", err, opened, closed)
	}
	bs, err := lease.OpenStoreSource(opener(lease.StoreConfig{Secret: secret}, nil))
	if err != nil || bs == nil {
		t.Fatalf("OpenStoreSource: %v", err)
	}

	// OpenStoreLeased takes the secret given; a Config naming another is
	// refused, closing what the opener opened, and never shown.
	other := []byte("other-secret-16b")
	closed = 0
	if _, err := lease.OpenStoreLeased(ctx, secret, opener(lease.StoreConfig{Secret: other}, nil)); err == nil ||
		err.Error() != "teststore: NewLeased: Config.Secret differs from the secret given" || closed != 1 {
		t.Errorf("OpenStoreLeased under a Config with another secret: %v (closed %d times), want it refused, and one Close", err, closed)
	} else if strings.Contains(err.Error(), string(other[:8])) || strings.Contains(err.Error(), string(secret[:8])) {
		t.Errorf("the error shows a secret: %v", err)
	}
	for _, c := range []struct {
		configured []byte
		ok         bool
	}{{nil, true}, {append([]byte(nil), secret...), true}, {other, false}, {[]byte{}, false}} {
		err := lease.CheckLeasedSecret("pglease", c.configured, secret)
		if c.ok && err != nil || !c.ok && (err == nil || err.Error() != "pglease: NewLeased: Config.Secret differs from the secret given") {
			t.Errorf("CheckLeasedSecret of a Config.Secret of %d bytes: %v, want ok %v", len(c.configured), err, c.ok)
		}
	}
	closed = 0
	if _, err := lease.OpenStoreLeased(ctx, secret[:8], opener(lease.StoreConfig{}, nil)); !errors.Is(err, randflake.ErrInvalidSecret) || closed != 1 {
		t.Errorf("OpenStoreLeased with an 8-byte secret: %v (closed %d times), want ErrInvalidSecret and one Close", err, closed)
	}
	for _, same := range [][]byte{nil, append([]byte(nil), secret...)} {
		closed = 0
		g, err := lease.OpenStoreLeased(ctx, secret, opener(lease.StoreConfig{Secret: same, Shards: 2}, nil))
		if err != nil || closed != 0 {
			t.Fatalf("OpenStoreLeased, Config.Secret %d bytes: %v (closed %d times)", len(same), err, closed)
		}
		id, err := g.Generate()
		if err != nil {
			t.Fatal(err)
		}
		// The generator runs under the secret given: its ID decrypts
		// under it to a node ID of the store's.
		in, err := randflake.NewInspector(secret)
		if err != nil {
			t.Fatal(err)
		}
		if _, node, _, err := in.Inspect(id); err != nil || node < 0 || node > 15 {
			t.Errorf("an ID of the generator decrypts under the secret to node %d (%v), want one of 0-15", node, err)
		}
		if err := g.Close(ctx); err != nil {
			t.Error(err)
		}
	}
}
