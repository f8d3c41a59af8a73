package events

import (
	"strings"
	"sync"
	"time"

	"github.com/k8s-lease/k8s-lease/lease/kubeapi"
)

// spamFilter is client-go's default spam filter for Events: per lease,
// uid, identity and type, a bucket of spamBurst that refills one per
// spamRefill. It keeps at most spamKeys buckets: a bucket that refilled is
// dropped first, as it is the same as a new one.
type spamFilter struct {
	mu      sync.Mutex
	buckets map[string]*bucket
}

type bucket struct {
	tokens float64
	at     time.Time
}

func (f *spamFilter) allow(ev *kubeapi.Event, now time.Time) bool {
	key := strings.Join([]string{ev.Source.Host, ev.InvolvedObject.Namespace, ev.InvolvedObject.Name,
		string(ev.InvolvedObject.UID), ev.Type}, "\x00")
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.buckets == nil {
		f.buckets = map[string]*bucket{}
	}
	b := f.buckets[key]
	if b == nil {
		if len(f.buckets) >= spamKeys {
			f.evict(now)
		}
		b = &bucket{tokens: spamBurst, at: now}
		f.buckets[key] = b
	}
	b.refill(now)
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

func (b *bucket) refill(now time.Time) {
	if now.After(b.at) {
		b.tokens = min(float64(spamBurst), b.tokens+float64(now.Sub(b.at))/float64(spamRefill))
		b.at = now
	}
}

// evict drops the buckets that refilled, or all when none did.
func (f *spamFilter) evict(now time.Time) {
	for k, b := range f.buckets {
		if b.refill(now); b.tokens >= spamBurst {
			delete(f.buckets, k)
		}
	}
	if len(f.buckets) >= spamKeys {
		clear(f.buckets)
	}
}
