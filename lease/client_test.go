package lease

import (
	"testing"
	"time"
)

// A Manager closes silent connections at most once per period of the one
// who asks, whoever asks: a hung API server costs a new connection per
// retry period, not one per election or per renewal.
func TestRedialsArePacedPerProcess(t *testing.T) {
	closer := &closerLog{}
	r := &redialer{conns: closer}
	t0 := testNow
	for _, step := range []struct {
		at     time.Duration
		period time.Duration
		want   int
	}{
		{0, time.Second, 1},
		{100 * time.Millisecond, time.Second, 0},             // another election, same period
		{900 * time.Millisecond, time.Second, 0},             // still within it
		{time.Second, time.Second, 1},                        // the next period
		{1500 * time.Millisecond, 400 * time.Millisecond, 1}, // a shorter period has passed
	} {
		if got := r.closeSilent(t0, t0.Add(step.at), step.period, "test"); got != step.want {
			t.Fatalf("at +%v (period %v): closed %d; want %d", step.at, step.period, got, step.want)
		}
	}
	if n := len(closer.sinces()); n != 3 {
		t.Fatalf("%d rounds; want 3", n)
	}
	var none *redialer
	if none.closeSilent(t0, t0, time.Second, "test") != 0 {
		t.Fatal("a nil redialer closed something")
	}
}
