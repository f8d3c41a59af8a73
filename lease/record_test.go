package lease

import (
	"math"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
)

func TestRVNewer(t *testing.T) {
	tests := []struct {
		a, b string
		want bool
	}{
		{"10", "9", true}, {"9", "10", false}, {"10", "10", false},
		{"5", "", true}, {"abc", "abd", true}, {"abc", "abc", false},
	}
	for _, tt := range tests {
		if got := rvNewer(tt.a, tt.b); got != tt.want {
			t.Errorf("rvNewer(%q, %q) = %v, want %v", tt.a, tt.b, got, tt.want)
		}
	}
}

func TestNextToken(t *testing.T) {
	tests := []struct {
		current, highest, want int64
		wantErr                bool
	}{
		{0, 0, 1, false},   // first creation gets 1, not client-go's 0
		{3, 0, 4, false},   // take-over
		{0, 7, 8, false},   // Lease re-created after deletion: above the old ones
		{-5, -1, 1, false}, // garbage in the record
		{math.MaxInt32, 0, 0, true},
	}
	for _, tt := range tests {
		got, err := nextToken(tt.current, tt.highest)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("nextToken(%d, %d) = %d, %v; want %d, err %v", tt.current, tt.highest, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestHoldAndReleaseSpec(t *testing.T) {
	l := &coordinationv1.Lease{}
	now := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	tm := Timing{LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second}
	holdSpec(l, "me", "inc1", 7, tm, now, true)
	r := recordOf(l)
	if !r.heldBy("me", "inc1") || r.token != 7 || r.durationSeconds != 15 || !r.renewTime.Equal(now) {
		t.Fatalf("held record = %+v", r)
	}
	if r.heldBy("me", "inc2") || r.heldBy("other", "inc1") {
		t.Fatal("heldBy ignores identity or incarnation")
	}
	acquired := l.Spec.AcquireTime.Time
	holdSpec(l, "me", "inc1", 7, tm, now.Add(time.Second), false)
	if !l.Spec.AcquireTime.Time.Equal(acquired) {
		t.Fatal("a renewal moved acquireTime")
	}
	releaseSpec(l, now)
	r = recordOf(l)
	if r.holder != "" || r.durationSeconds != 1 || r.token != 7 || r.incarnation != "" {
		t.Fatalf("released record = %+v, want no holder, 1 s, token kept", r)
	}
}

func TestRecordOfNilAndEmpty(t *testing.T) {
	if r := recordOf(nil); r.exists {
		t.Fatal("nil lease exists")
	}
	if r := recordOf(&coordinationv1.Lease{}); !r.exists || r.holder != "" || r.token != 0 {
		t.Fatalf("empty lease record = %+v", r)
	}
}
