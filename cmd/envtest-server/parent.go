package main

import (
	"context"
	"os"
	"time"
)

// watchParent returns a channel that is closed when this process's parent
// dies. The kernel then re-parents us (to init or a subreaper), so a changed
// parent pid is the signal. Polling is used instead of PR_SET_PDEATHSIG
// because that fires when the parent *thread* that forked us exits, which
// happens in multi-threaded test runners while the parent is alive.
func watchParent(ctx context.Context, every time.Duration) <-chan struct{} {
	orphaned := make(chan struct{})
	original := os.Getppid()
	go func() {
		ticker := time.NewTicker(every)
		defer ticker.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
				if os.Getppid() != original {
					close(orphaned)
					return
				}
			}
		}
	}()
	return orphaned
}
