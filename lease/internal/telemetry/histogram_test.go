package telemetry

import (
	"testing"
	"time"
)

func TestHistogramBuckets(t *testing.T) {
	for _, tc := range []struct {
		name   string
		d      time.Duration
		bucket int
	}{
		{"zero", 0, 0},
		{"on a bound", time.Millisecond, 0},
		{"just above a bound", time.Millisecond + 1, 1},
		{"mid", 30 * time.Millisecond, 5},
		{"last bound", 10 * time.Second, 12},
		{"beyond every bound", time.Hour, histogramBounds},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h histogram
			h.observe(&requestBuckets, tc.d)
			for i := range h.counts {
				want := int64(0)
				if i == tc.bucket {
					want = 1
				}
				if got := h.counts[i].Load(); got != want {
					t.Fatalf("bucket %d = %d, want %d", i, got, want)
				}
			}
			if h.sum.Load() != int64(tc.d) {
				t.Fatalf("sum = %d, want %d", h.sum.Load(), tc.d)
			}
		})
	}
}
