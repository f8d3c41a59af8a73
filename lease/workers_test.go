package lease

import (
	"sync"
	"testing"
	"time"
)

func TestWorkers(t *testing.T) {
	for _, tc := range []struct {
		name string
		// run gives jobs to w and returns how many workers it expects to
		// have been started.
		run func(t *testing.T, w *workers) int64
	}{
		{"a job runs", func(t *testing.T, w *workers) int64 {
			done := make(chan struct{})
			w.Go(func() { close(done) })
			waitClosed(t, done)
			return 1
		}},
		{"jobs one after another share a worker", func(t *testing.T, w *workers) int64 {
			for i := 0; i < 20; i++ {
				done := make(chan struct{})
				w.Go(func() { close(done) })
				waitClosed(t, done)
				eventually(t, time.Second, "the worker waiting again", func() bool { return w.waiting.Load() == 1 })
			}
			return 1
		}},
		{"jobs at once never wait for each other", func(t *testing.T, w *workers) int64 {
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
			w := newWorkers(200 * time.Millisecond)
			want := tc.run(t, w)
			if got := w.started.Load(); got != want {
				t.Fatalf("%d workers started, want %d", got, want)
			}
			eventually(t, 5*time.Second, "idle workers ended", func() bool { return w.running.Load() == 0 })
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
