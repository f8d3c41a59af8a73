package lease

import (
	"sync"
	"testing"
	"time"
)

func TestWorkers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		idle time.Duration // the workers' idle time
		// run gives jobs to w and returns how many workers it expects to
		// have been started.
		run func(t *testing.T, w *workers) int64
	}{
		{"a job runs", 200 * time.Millisecond, func(t *testing.T, w *workers) int64 {
			done := make(chan struct{})
			w.Go(func() { close(done) })
			waitClosed(t, done)
			return 1
		}},
		// A worker counts itself waiting just before it waits, so a job
		// given at once can miss it (Go then starts another worker, as it
		// must); on a busy machine that gap is long. The next job is
		// offered as Go offers it, until the waiting worker takes it, and
		// the worker waits longer than this row can take.
		{"a waiting worker takes the next job", 2 * time.Second, func(t *testing.T, w *workers) int64 {
			done := make(chan struct{})
			w.Go(func() { close(done) })
			waitClosed(t, done)
			for i := 0; i < 20; i++ {
				done := make(chan struct{})
				job := func() { close(done) }
				eventually(t, 5*time.Second, "the waiting worker taking a job", func() bool {
					select {
					case w.idle <- job:
						return true
					default:
						return false
					}
				})
				waitClosed(t, done)
			}
			return 1
		}},
		{"jobs at once never wait for each other", 200 * time.Millisecond, func(t *testing.T, w *workers) int64 {
			release := make(chan struct{})
			var started sync.WaitGroup
			started.Add(3)
			for i := 0; i < 3; i++ {
				w.Go(func() { started.Done(); <-release })
			}
			all := make(chan struct{})
			go func() { started.Wait(); close(all) }()
			waitClosed(t, all) // three jobs run together: none was queued
			close(release)
			return 3
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorkers(tc.idle)
			want := tc.run(t, w)
			if got := w.started.Load(); got != want {
				t.Fatalf("%d workers started, want %d", got, want)
			}
			eventually(t, tc.idle+5*time.Second, "idle workers ended", func() bool { return w.running.Load() == 0 })
		})
	}
}

func waitClosed(t *testing.T, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("not done within 5 s")
	}
}
