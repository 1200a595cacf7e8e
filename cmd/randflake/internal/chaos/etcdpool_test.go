//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/randflake/randflake"
	"github.com/randflake/randflake/etcdlease"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The etcd fleet's free pool. etcdlease divides the node IDs into blocks
// of --claim node IDs, each claimed by one key, PREFIX claim/NNNNNN (the
// block's first node ID), attached to its holder's etcd lease. Only the
// lowest blocks are free; every other block is claimed for good by a
// stand-in key with no etcd lease, as if the rest of a large fleet held
// it. So the test's processes must hand node IDs to one another: a
// replacement takes over the block of the process it replaces once that
// process's claim has lapsed, and a claimant started while a server is
// paused or cut off takes over the paused server's block.
type pool struct {
	cli  *clientv3.Client
	free int // blocks 0..free-1 are free
}

// standIn is the value of the stand-in claims.
const standIn = "held for good by the chaos test: not part of the free pool"

func claimKey(node int64) string {
	return fmt.Sprintf("%sclaim/%06d", etcdlease.DefaultPrefix, node)
}

// blocks returns the number of blocks of the fleet's layout.
func blocks() int64 { return (randflake.MaxNode + 1) / etcdClaim }

// block claims every block from first on with a stand-in key.
func (p *pool) block(ctx context.Context, first int) error {
	for b := int64(first); b < blocks(); b += 128 {
		var ops []clientv3.Op
		for i := b; i < min(b+128, blocks()); i++ {
			ops = append(ops, clientv3.OpPut(claimKey(i*etcdClaim), standIn))
		}
		if _, err := p.cli.Txn(ctx).Then(ops...).Commit(); err != nil {
			return err
		}
	}
	p.free = first
	return nil
}

// reblock puts the stand-ins back after a wipe deleted them, lowest block
// first, each only where no key claims the block: a process that claimed
// a block outside the pool meanwhile keeps it (and the check of the IDs
// reports the node IDs it used outside the pool). It returns how many
// blocks it found claimed.
func (p *pool) reblock(ctx context.Context) (int, error) {
	taken := 0
	for b := int64(p.free); b < blocks(); b += 128 {
		end := min(b+128, blocks())
		var ops []clientv3.Op
		for i := b; i < end; i++ {
			ops = append(ops, clientv3.OpPut(claimKey(i*etcdClaim), standIn))
		}
		empty := clientv3.Compare(clientv3.CreateRevision(claimKey(b*etcdClaim)), "=", 0).WithRange(claimKey(end * etcdClaim))
		resp, err := p.cli.Txn(ctx).If(empty).Then(ops...).Commit()
		if err != nil {
			return taken, err
		}
		if resp.Succeeded {
			continue
		}
		for i := b; i < end; i++ {
			k := claimKey(i * etcdClaim)
			resp, err := p.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).Then(clientv3.OpPut(k, standIn)).Commit()
			if err != nil {
				return taken, err
			}
			if !resp.Succeeded {
				taken++
			}
		}
	}
	return taken, nil
}

// grow frees the next block and returns its first node ID.
func (p *pool) grow(ctx context.Context) (int64, error) {
	first := int64(p.free) * etcdClaim
	var err error
	for try := 0; try < 20; try++ {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err = p.cli.Delete(cctx, claimKey(first))
		cancel()
		if err == nil {
			p.free++
			return first, nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return 0, err
}

// claim returns the value of the claim key of node, and whether it exists.
func (p *pool) claim(ctx context.Context, node int64) (string, bool, error) {
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	resp, err := p.cli.Get(cctx, claimKey(node))
	if err != nil {
		return "", false, err
	}
	if len(resp.Kvs) == 0 {
		return "", false, nil
	}
	return string(resp.Kvs[0].Value), true, nil
}

// unknownRE reads the second up to which the fleet marker makes history
// unknown (docs/leases.md describes the marker's text).
var unknownRE = regexp.MustCompile(` unknown=(\d+) `)

// markerState returns the revision and the ID of the cluster and the
// second up to which the fleet's marker makes the history unknown (0 if
// there is no marker).
func (p *pool) markerState(ctx context.Context) (rev, unknown int64, cluster uint64, err error) {
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	resp, err := p.cli.Get(cctx, etcdlease.DefaultPrefix+"marker")
	if err != nil {
		return 0, 0, 0, err
	}
	if len(resp.Kvs) == 1 {
		if m := unknownRE.FindSubmatch(resp.Kvs[0].Value); m != nil {
			unknown, _ = strconv.ParseInt(string(m[1]), 10, 64)
		}
	}
	return resp.Header.Revision, unknown, resp.Header.ClusterId, nil
}
