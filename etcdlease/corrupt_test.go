package etcdlease

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/randflake/randflake"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A record that fails its check, or an older one put back even with a
// valid check, is history the engine cannot trust: the next claim of the
// prefix waits out the horizon, and is never wrapped into a lease that
// starts at once or refused with an error. Values this package wrote
// before the lease engine (a bare second) are such records too.
func TestBadRecordsWaitedOut(t *testing.T) {
	t.Parallel()
	_, cli := startEtcd(t)
	cases := map[string]func(old, cur string) string{
		"max int64":           func(string, string) string { return "9223372036854775807" },
		"negative":            func(string, string) string { return "-5" },
		"bare second":         func(string, string) string { return fmt.Sprint(time.Now().Unix() - 100) },
		"garbage":             func(string, string) string { return "12x" },
		"empty":               func(string, string) string { return "" },
		"tag flipped":         func(_, cur string) string { return flipLast(cur) },
		"older, valid tag":    func(old, _ string) string { return old },
		"another block's tag": func(_, cur string) string { return "rfb1 16 31" + cur[len("rfb1 0 15"):] },
	}
	// The cases run side by side, each on a prefix of its own: each
	// waits out the horizon twice.
	var wg sync.WaitGroup
	for name, bad := range cases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			waited, err := badRecordCase(cli, "/bad/"+name+"/", bad)
			if err != nil {
				t.Errorf("%s: %v", name, err)
				return
			}
			t.Logf("%s: the claim waited %d s", name, waited)
		}()
	}
	wg.Wait()
}

// badRecordCase runs one case of TestBadRecordsWaitedOut: two holders in
// turn leave a record each on the block of prefix, bad replaces the record
// given the two, and a claim follows. It returns how many seconds after
// its claim the lease started.
func badRecordCase(cli *clientv3.Client, prefix string, bad func(old, cur string) string) (int64, error) {
	cfg := testConfig(cli, prefix, 15, "")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var recs []string
	for range 2 {
		g, err := NewLeased(ctx, testSecret, cfg)
		if err != nil {
			return 0, err
		}
		if _, err := g.Generate(); err != nil {
			return 0, err
		}
		if err := g.Close(ctx); err != nil {
			return 0, err
		}
		resp, err := cli.Get(ctx, prefix+"record/000000")
		if err != nil || len(resp.Kvs) != 1 {
			return 0, fmt.Errorf("no record after a release: %v", err)
		}
		recs = append(recs, string(resp.Kvs[0].Value))
		time.Sleep(1100 * time.Millisecond) // a later second for the next record
	}
	if recs[0] == recs[1] {
		return 0, fmt.Errorf("the two holders left the same record %q", recs[0])
	}
	if _, err := cli.Put(ctx, prefix+"record/000000", bad(recs[0], recs[1])); err != nil {
		return 0, err
	}
	src, err := New(cfg)
	if err != nil {
		return 0, err
	}
	claimed := time.Now().Unix()
	l, err := src.Acquire(ctx)
	if err != nil {
		return 0, fmt.Errorf("Acquire: %w; want a lease after the horizon", err)
	}
	if err := src.Release(ctx, l, 0); err != nil {
		return 0, err
	}
	if l.Start <= claimed+horizonSeconds || l.End < l.Start || l.End > randflake.MaxTimestamp {
		return 0, fmt.Errorf("lease %v after a bad record; want one starting after %d", l, claimed+horizonSeconds)
	}
	return l.Start - claimed, nil
}

// flipLast changes the last hexadecimal digit of s.
func flipLast(s string) string {
	b := []byte(s)
	if b[len(b)-1] == '0' {
		b[len(b)-1] = '1'
	} else {
		b[len(b)-1] = '0'
	}
	return string(b)
}
