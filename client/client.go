// Package client fetches Randflake IDs from a `randflake serve` instance in
// batches, prefetching in the background so that callers usually get an ID
// from a local buffer without a network round trip.
//
// The buffer is bounded, IDs older than Config.MaxAge are never handed out
// (an ID's timestamp says when it was made, and a stale one would break the
// ordering that readers of the timestamps expect), and fetch errors are
// returned to callers rather than swallowed.
package client

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"
)

// Config configures a Client. Only URL is required.
type Config struct {
	// URL is the base URL of the ID service, e.g. "http://127.0.0.1:8080".
	URL string
	// HTTPClient makes the requests; nil means a client with a 10-second
	// timeout.
	HTTPClient *http.Client
	// BatchSize is the number of IDs fetched per request (default 1,000).
	BatchSize int
	// LowWater starts a background fetch when fewer IDs are buffered
	// (default BatchSize/2).
	LowWater int
	// MaxAge is how long a fetched ID may wait in the buffer before it is
	// discarded (default 1 second; the server hands out IDs at most one
	// second behind its clock).
	MaxAge time.Duration
}

// ErrClosed is returned by Next after Close.
var ErrClosed = errors.New("randflake/client: client closed")

// Client hands out IDs from a prefetched buffer. It is safe for concurrent
// use.
type Client struct {
	cfg      Config
	endpoint string
	http     *http.Client

	mu       sync.Mutex
	batches  []batch // oldest first
	buffered int
	fetching bool
	err      error         // last fetch error, returned once by Next
	wake     chan struct{} // closed when a fetch ends
	closed   bool
	ctx      context.Context
	cancel   context.CancelFunc
}

type batch struct {
	ids []int64
	at  time.Time // when the request for them was sent
}

// New returns a client; it does not contact the server until the first
// call to Next or Prefetch.
func New(cfg Config) (*Client, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("randflake/client: bad URL %q", cfg.URL)
	}
	if cfg.BatchSize == 0 {
		cfg.BatchSize = 1000
	}
	if cfg.BatchSize < 1 {
		return nil, errors.New("randflake/client: BatchSize must be positive")
	}
	if cfg.LowWater == 0 {
		cfg.LowWater = cfg.BatchSize / 2
	}
	if cfg.LowWater < 0 || cfg.LowWater > cfg.BatchSize {
		return nil, errors.New("randflake/client: LowWater must be between 0 and BatchSize")
	}
	if cfg.MaxAge == 0 {
		cfg.MaxAge = time.Second
	}
	if cfg.MaxAge < 0 {
		return nil, errors.New("randflake/client: MaxAge must be positive")
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{Timeout: 10 * time.Second}
	}
	u = u.JoinPath("v1", "ids")
	u.RawQuery = url.Values{"count": {strconv.Itoa(cfg.BatchSize)}, "format": {"int"}}.Encode()
	ctx, cancel := context.WithCancel(context.Background())
	return &Client{cfg: cfg, endpoint: u.String(), http: hc, wake: make(chan struct{}), ctx: ctx, cancel: cancel}, nil
}

// Next returns an ID, waiting for a fetch if the buffer is empty. If the
// last fetch failed and nothing is buffered, it returns that error (once;
// the next call tries again).
func (c *Client) Next(ctx context.Context) (int64, error) {
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return 0, ErrClosed
		}
		c.dropExpired(time.Now())
		if c.buffered > 0 {
			b := &c.batches[0]
			id := b.ids[0]
			b.ids = b.ids[1:]
			if len(b.ids) == 0 {
				c.batches = c.batches[1:]
			}
			c.buffered--
			if c.buffered < c.cfg.LowWater {
				c.startFetch()
			}
			c.mu.Unlock()
			return id, nil
		}
		if err := c.err; err != nil && !c.fetching {
			c.err = nil
			c.mu.Unlock()
			return 0, err
		}
		c.startFetch()
		wake := c.wake
		c.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// Prefetch starts a background fetch if none is running.
func (c *Client) Prefetch() {
	c.mu.Lock()
	if !c.closed {
		c.startFetch()
	}
	c.mu.Unlock()
}

// Buffered returns the number of IDs in the buffer.
func (c *Client) Buffered() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dropExpired(time.Now())
	return c.buffered
}

// Close stops background fetching and empties the buffer.
func (c *Client) Close() {
	c.mu.Lock()
	c.closed = true
	c.batches, c.buffered = nil, 0
	c.mu.Unlock()
	c.cancel()
}

func (c *Client) dropExpired(now time.Time) {
	for len(c.batches) > 0 && now.Sub(c.batches[0].at) > c.cfg.MaxAge {
		c.buffered -= len(c.batches[0].ids)
		c.batches = c.batches[1:]
	}
}

// startFetch starts one background fetch unless one is running or the
// buffer cannot take a batch. c.mu is held.
func (c *Client) startFetch() {
	if c.fetching || c.buffered+c.cfg.BatchSize > 2*c.cfg.BatchSize {
		return
	}
	c.fetching = true
	go c.fetch()
}

func (c *Client) fetch() {
	at := time.Now()
	ids, err := c.get()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fetching = false
	if err != nil {
		c.err = err
	} else if !c.closed && len(ids) > 0 {
		c.batches = append(c.batches, batch{ids: ids, at: at})
		c.buffered += len(ids)
		c.err = nil
	}
	close(c.wake)
	c.wake = make(chan struct{})
}

// maxErrorBody bounds how much of an error response is read.
const maxErrorBody = 4 << 10

func (c *Client) get() ([]int64, error) {
	req, err := http.NewRequestWithContext(c.ctx, http.MethodGet, c.endpoint, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/plain")
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("randflake/client: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		return nil, fmt.Errorf("randflake/client: %s: %s", resp.Status, body)
	}
	ids := make([]int64, 0, c.cfg.BatchSize)
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		id, err := strconv.ParseInt(sc.Text(), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("randflake/client: bad ID in response: %q", sc.Text())
		}
		ids = append(ids, id)
		if len(ids) > c.cfg.BatchSize {
			return nil, errors.New("randflake/client: server sent more IDs than asked for")
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("randflake/client: reading response: %w", err)
	}
	if len(ids) == 0 {
		return nil, errors.New("randflake/client: server sent no IDs")
	}
	return ids, nil
}
