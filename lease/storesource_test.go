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
		return lease.NewStoreSource(st, lease.StoreSourceConfig{
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
		_, err := lease.NewStoreSource(st, lease.StoreSourceConfig{Name: "teststore", Secret: c.secret, Layout: layout,
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
	_, err = lease.NewStoreSource(st, lease.StoreSourceConfig{Name: "teststore", Secret: []byte(secret),
		Layout: lease.BlockLayout{FirstNode: 0, LastNode: 15, Size: 3}, Close: func() { closed++ }})
	if err == nil || !strings.HasPrefix(err.Error(), "teststore: ") || closed != 1 {
		t.Errorf("a bad layout: %v (closed %d times), want an error naming teststore and one Close", err, closed)
	}

	// Success closes nothing.
	closed = 0
	bs, err := lease.NewStoreSource(st, lease.StoreSourceConfig{Name: "teststore", Secret: []byte(secret), Layout: layout,
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
	bs, err := lease.NewStoreSource(st, lease.StoreSourceConfig{Name: "teststore", Secret: secret, Layout: lease.StaticLayout(0, 15)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	closed := 0
	if _, err := lease.NewStoreLeased(ctx, bs, lease.StoreLeasedConfig{Name: "teststore", Secret: secret[:8], Close: func() { closed++ }}); err == nil ||
		!strings.HasPrefix(err.Error(), "teststore: Config.Secret is 8 bytes") || closed != 1 {
		t.Errorf("an 8-byte secret: %v (closed %d times), want it refused naming teststore, and one Close", err, closed)
	}
	dead, cancelDead := context.WithCancel(ctx)
	cancelDead()
	closed = 0
	if _, err := lease.NewStoreLeased(dead, bs, lease.StoreLeasedConfig{Name: "teststore", Secret: secret, Close: func() { closed++ }}); err == nil || closed != 1 {
		t.Errorf("a cancelled context: %v (closed %d times), want an error and one Close", err, closed)
	}

	closed = 0
	g, err := lease.NewStoreLeased(ctx, bs, lease.StoreLeasedConfig{Name: "teststore", Secret: secret, Shards: 2, Close: func() { closed++ }})
	if err != nil || closed != 0 {
		t.Fatalf("NewStoreLeased: %v (closed %d times)", err, closed)
	}
	defer g.Close(ctx)
	if _, err := g.Generate(); err != nil {
		t.Fatal(err)
	}
}
