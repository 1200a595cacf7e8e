package main

import (
	"context"
	"log/slog"
	"os"
	"time"
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
