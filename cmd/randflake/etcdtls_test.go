package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// An https:// endpoint that accepts connections and closes each one
// before a TLS handshake (a server that does not speak TLS to this
// client) is tried maxTLSStalls times, then refused with the advice to
// use http://; a context that ends while it is tried ends the wait.
func TestConnectEtcdStalledHandshakes(t *testing.T) {
	retryPause, maxRetryPause = time.Millisecond, 2*time.Millisecond
	t.Cleanup(func() { retryPause, maxRetryPause = 100*time.Millisecond, 2*time.Second })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var accepted atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	l := &leaseFlags{etcd: "https://" + ln.Addr().String()}
	cfg := clientv3.Config{Endpoints: []string{l.etcd}, DialTimeout: time.Second}
	log := slog.New(slog.DiscardHandler)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cli, err := l.connectEtcd(ctx, log, cfg)
	if err == nil {
		cli.Close()
		t.Fatal("connectEtcd to an endpoint that closes every connection before a handshake: no error")
	}
	if !strings.Contains(err.Error(), "no TLS handshake completed in 3 attempts") || !strings.Contains(err.Error(), "http://") {
		t.Errorf("connectEtcd: %v; want it to say no TLS handshake completed in 3 attempts, and to suggest http://", err)
	}
	if n := accepted.Load(); n != maxTLSStalls {
		t.Errorf("the endpoint was connected to %d times, want %d", n, maxTLSStalls)
	}

	cctx, ccancel := context.WithCancel(context.Background())
	ccancel()
	if _, err := l.connectEtcd(cctx, log, cfg); !errors.Is(err, context.Canceled) {
		t.Errorf("connectEtcd on a cancelled context: %v, want the context's error", err)
	}
}
