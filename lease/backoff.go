package lease

import (
	"math/rand/v2"
	"time"
)

// backoff doubles a delay from min to max, with up to 50% jitter so that
// many processes do not retry in step.
type backoff struct {
	min, max, cur time.Duration
}

func newBackoff(minDelay, maxDelay time.Duration) *backoff {
	return &backoff{min: minDelay, max: maxDelay}
}

func (b *backoff) next() time.Duration {
	if b.cur == 0 {
		b.cur = b.min
	} else {
		b.cur = min(2*b.cur, b.max)
	}
	return b.cur/2 + rand.N(b.cur/2+1)
}

func (b *backoff) reset() { b.cur = 0 }
