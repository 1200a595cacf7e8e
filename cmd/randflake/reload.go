package main

import (
	"context"
	"crypto/sha256"
	"log/slog"
	"os"
	"sync"
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

// reloadState is what serve keeps of a reloadable file besides its
// content: the digest of the content in use (loaded) and the last
// failure, so that a failure is logged once for each content, or error
// (failureKey), unless the reload is forced. Reloads hold mu.
type reloadState struct {
	log      *slog.Logger
	failures *reloadFailures // nil counts nothing
	file     string          // the failures' label: reloadTLS or reloadTokens
	// notReloaded and unchanged are the messages logged when the content
	// cannot be read and when it did not change.
	notReloaded, unchanged string

	mu      sync.Mutex
	loaded  [sha256.Size]byte // digest of the content in use
	failed  [sha256.Size]byte // failureKey of the last reload, if it failed
	failing bool              // the last reload failed
}

// settle ends a reload whose outcome does not depend on the kind of file:
// a read that failed with err (logged as notReloaded and counted), or
// content whose digest is loaded's (logged as unchanged if forced). It
// reports whether it did; if not, the content read is new.
func (s *reloadState) settle(digest [sha256.Size]byte, err error, trigger string, force bool) bool {
	switch {
	case err != nil:
		if s.fail(failureKey(digest, err), force) {
			s.log.Warn(s.notReloaded, "trigger", trigger, "err", err)
		}
		s.failures.failed(s.file, reasonError)
	case digest == s.loaded:
		s.failing = false
		if force {
			s.log.Info(s.unchanged, "trigger", trigger)
		}
	default:
		return false
	}
	return true
}

// took records that the content of digest is now in use: a reload that
// succeeded, or the first load.
func (s *reloadState) took(digest [sha256.Size]byte) { s.loaded, s.failing = digest, false }

// fail records a failed reload, told apart from others by key, and
// reports whether to log it: if forced, or unless the last reload failed
// with the same key.
func (s *reloadState) fail(key [sha256.Size]byte, force bool) bool {
	report := force || !s.failing || key != s.failed
	s.failed, s.failing = key, true
	return report
}

// failureKey tells failed reloads apart, so that each is logged once: the
// digest of the content read, or of the error if nothing was read.
func failureKey(digest [sha256.Size]byte, err error) [sha256.Size]byte {
	if digest != ([sha256.Size]byte{}) {
		return digest
	}
	return sha256.Sum256([]byte(err.Error()))
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
