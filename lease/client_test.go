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
		if got, _ := r.closeSilent(t0, t0.Add(step.at), step.period, "test"); got != step.want {
			t.Fatalf("at +%v (period %v): closed %d; want %d", step.at, step.period, got, step.want)
		}
	}
	if n := len(closer.sinces()); n != 3 {
		t.Fatalf("%d rounds; want 3", n)
	}
	var none *redialer
	if n, _ := none.closeSilent(t0, t0, time.Second, "test"); n != 0 {
		t.Fatal("a nil redialer closed something")
	}
}

// closesNothing is a client whose connections all answer.
type closesNothing struct{ asked int }

func (c *closesNothing) CloseSilentConnections(time.Time) int { c.asked++; return 0 }

// A round that closed nothing dialled nothing: it does not hold back the
// next one (an observer's round on a busy connection, an acquisition
// answered 5xx, must not delay a leader's round by a retry period).
func TestARoundThatClosedNothingDoesNotCount(t *testing.T) {
	c := &closesNothing{}
	r := &redialer{conns: c}
	t0 := testNow
	if n, _ := r.closeSilent(t0, t0, time.Second, "test"); n != 0 {
		t.Fatalf("closed %d", n)
	}
	if _, next := r.closeSilent(t0, t0.Add(200*time.Millisecond), time.Second, "test"); !next.IsZero() || c.asked != 2 {
		t.Fatalf("the second round was refused until %v (asked %d times); want it made", next, c.asked)
	}
}
