package lease

import (
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestObserverApply(t *testing.T) {
	clk := clocktesting.NewFakeClock(testNow)
	o := newObserver(fake.NewClientset().CoordinationV1().Leases("ns"), "l", clk, time.Minute, 0, &leaseStats{})
	notify := o.subscribe()

	o.apply(testLease("l", "a", 3, testNow, 10), "10")
	s := o.snapshot()
	if !s.synced || s.rec.holder != "a" || !s.observedAt.Equal(testNow) || s.highestToken != 3 {
		t.Fatalf("first apply: %+v", s)
	}
	select {
	case <-notify:
	default:
		t.Fatal("no notification")
	}

	clk.Step(time.Second)
	o.apply(testLease("l", "old", 1, testNow, 10), "9") // stale: ignored
	if s := o.snapshot(); s.rec.holder != "a" {
		t.Fatalf("stale state applied: %+v", s.rec)
	}

	o.apply(testLease("l", "a", 3, testNow, 10), "11") // same record, newer RV
	if s := o.snapshot(); !s.observedAt.Equal(testNow) {
		t.Fatal("an unchanged record reset the observation time")
	}

	clk.Step(time.Second)
	o.apply(testLease("l", "a", 3, testNow.Add(2*time.Second), 10), "12") // renewal
	if s := o.snapshot(); !s.observedAt.Equal(testNow.Add(2 * time.Second)) {
		t.Fatal("a renewal did not reset the observation time")
	}

	clk.Step(time.Second)
	o.apply(nil, "13") // deleted
	s = o.snapshot()
	if s.rec.exists || s.lastHeld.holder != "a" || !s.lastHeldAt.Equal(testNow.Add(2*time.Second)) || s.highestToken != 3 {
		t.Fatalf("after deletion: %+v", s)
	}
}

func TestHolderView(t *testing.T) {
	s := snapshot{synced: true, rec: recordOf(testLease("l", "a", 2, testNow, 10)), observedAt: testNow}
	tests := []struct {
		at         time.Time
		wantHolder string
	}{
		{testNow, "a"}, {testNow.Add(9999 * time.Millisecond), "a"}, {testNow.Add(10 * time.Second), ""},
	}
	for _, tt := range tests {
		if h, tok, ok := s.holderView(tt.at); h != tt.wantHolder || tok != 2 || !ok {
			t.Errorf("holderView(%v) = %q, %d, %v", tt.at.Sub(testNow), h, tok, ok)
		}
	}
	if h, tok, ok := (snapshot{synced: true}).holderView(testNow); h != "" || tok != 0 || ok {
		t.Errorf("absent: %q %d %v", h, tok, ok)
	}
}
