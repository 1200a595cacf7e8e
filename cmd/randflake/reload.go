package main

import (
	"context"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// reloadInterval is how often serve compares its TLS and issue tokens
// files with what it loaded.
const reloadInterval = 2 * time.Second

// reloadable is a file (or set of files) that serve reads again while
// running. reload compares the content with what is in use, and logs only
// changes and new failures unless force says that someone asked (SIGHUP).
type reloadable interface {
	reload(trigger string, force bool)
}

// watchFiles reloads items every reloadInterval and at each signal on
// hup, until ctx ends. Reading the content, rather than watching for
// events or comparing modification times, also sees a file that was
// replaced by swapping a directory link (as the kubelet updates Secret
// volumes) or rewritten within the same second.
func watchFiles(ctx context.Context, log *slog.Logger, hup <-chan os.Signal, items []reloadable) {
	tick := time.NewTicker(reloadInterval)
	defer tick.Stop()
	if len(items) == 0 {
		tick.Stop()
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			if len(items) == 0 {
				log.Info("SIGHUP: nothing to reload (no --tls-cert-file and no --issue-tokens-file)")
			}
			for _, it := range items {
				it.reload("SIGHUP", true)
			}
		case <-tick.C:
			for _, it := range items {
				it.reload("file change", false)
			}
		}
	}
}

// Reload failures, the labels of randflake_reload_failures_total: file
// is which files (reloadTLS: the certificate, key and CA files, read
// together; reloadTokens: the issue tokens file), reason why.
const (
	reloadTLS    = "tls"
	reloadTokens = "issue_tokens"

	reasonError    = "error"                 // unreadable, refused by the file checks, or not parsed
	reasonValidity = "certificate_not_valid" // a certificate expired or not yet valid, refused for a valid one
)

// reloadFailures counts the reloads that failed: every attempt, at each
// poll and SIGHUP, while the files stay bad, so that an alert on its
// increase lasts as long as the failure.
type reloadFailures struct {
	vec *prometheus.CounterVec
}

// newReloadFailures registers randflake_reload_failures_total on reg,
// with a series for every file and reason from the start (also without
// the files, so that the alert's metric always exists).
func newReloadFailures(reg prometheus.Registerer) (*reloadFailures, error) {
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "randflake_reload_failures_total",
		Help: "Failed reloads of serve's files (file: tls, issue_tokens; reason: error, certificate_not_valid); the files in use stay.",
	}, []string{"file", "reason"})
	for _, f := range []string{reloadTLS, reloadTokens} {
		for _, r := range []string{reasonError, reasonValidity} {
			vec.WithLabelValues(f, r)
		}
	}
	if err := reg.Register(vec); err != nil {
		return nil, err
	}
	return &reloadFailures{vec: vec}, nil
}

// failed counts a failed reload; a nil r counts nothing.
func (r *reloadFailures) failed(file, reason string) {
	if r != nil {
		r.vec.WithLabelValues(file, reason).Inc()
	}
}
