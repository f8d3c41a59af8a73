package telemetry

import (
	"sort"
	"sync/atomic"
	"time"
)

// histogram counts observations in fixed buckets (upper bounds in
// seconds, given at each call), lock-free, as Prometheus cumulative
// buckets. Its zero value is ready.
type histogram struct {
	counts [histogramBounds + 1]atomic.Int64 // counts[i]: in (bounds[i-1], bounds[i]]; last: +Inf
	sum    atomic.Int64                      // nanoseconds
}

const histogramBounds = 13

type buckets = [histogramBounds]float64

// Bucket bounds: requests take milliseconds to seconds; campaigns last
// from milliseconds (a free lease) to hours (a standby).
var (
	requestBuckets  = buckets{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
	campaignBuckets = buckets{0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800, 3600}
)

func (h *histogram) observe(bounds *buckets, d time.Duration) {
	i := sort.SearchFloat64s(bounds[:], d.Seconds()) // first bound >= d
	h.counts[i].Add(1)
	h.sum.Add(int64(d))
}
