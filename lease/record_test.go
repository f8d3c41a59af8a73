package lease

import (
	"context"
	"encoding/json"
	"math"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
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

// The renewal patch renews only a Lease exactly as we hold it.
func TestRenewPatchIsCompareAndSwap(t *testing.T) {
	held := func() *coordinationv1.Lease {
		l := testLease("l", "me", 3, testNow, 15)
		l.Annotations = map[string]string{IncarnationAnnotation: "inc-1"}
		return l
	}
	cases := []struct {
		name  string
		edit  func(l *coordinationv1.Lease)
		renew bool
	}{
		{"held as written", func(*coordinationv1.Lease) {}, true},
		{"holder changed", func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = ptr.To("other") }, false},
		{"holder cleared (released)", func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = nil }, false},
		{"same identity, other incarnation", func(l *coordinationv1.Lease) { l.Annotations[IncarnationAnnotation] = "inc-2" }, false},
		{"no incarnation (a client-go writer)", func(l *coordinationv1.Lease) { l.Annotations = nil }, false},
		{"token changed", func(l *coordinationv1.Lease) { l.Spec.LeaseTransitions = ptr.To(int32(4)) }, false},
		{"duration edited", func(l *coordinationv1.Lease) { l.Spec.LeaseDurationSeconds = ptr.To(int32(1)) }, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := held()
			tc.edit(l)
			leases := fake.NewClientset(l).CoordinationV1().Leases("ns")
			now := testNow.Add(2 * time.Second)
			patch, err := newRenewPatch("me", "inc-1", 3, unitTiming)
			if err != nil {
				t.Fatal(err)
			}
			got, err := leases.Patch(context.Background(), "l", types.JSONPatchType, patch.at(now), metav1.PatchOptions{})
			if tc.renew {
				if err != nil || !got.Spec.RenewTime.Time.Equal(now.Truncate(time.Microsecond)) || *got.Spec.HolderIdentity != "me" {
					t.Fatalf("renewal of a held lease: %v %+v", err, got)
				}
				return
			}
			if err == nil {
				t.Fatalf("renewed a lease that is not ours: %+v", got.Spec)
			}
			cur, _ := leases.Get(context.Background(), "l", metav1.GetOptions{})
			if !cur.Spec.RenewTime.Time.Equal(testNow) {
				t.Fatalf("a failed renewal changed renewTime to %v", cur.Spec.RenewTime)
			}
		})
	}
}

// The renewal time is appended by hand: it must read back exactly as
// metav1.MicroTime writes it, whatever the zone and sub-microsecond part.
func TestRenewPatchTimeEncodesAsMicroTime(t *testing.T) {
	patch, err := newRenewPatch("me/\"~", "inc-1", 1<<31-1, unitTiming)
	if err != nil {
		t.Fatal(err)
	}
	east := time.FixedZone("east", 5*3600+1800)
	for _, now := range []time.Time{
		testNow,
		time.Date(2026, 11, 29, 23, 59, 59, 999999999, time.UTC),
		time.Date(2026, 1, 2, 3, 4, 5, 6000, east),
		time.Date(1999, 12, 31, 23, 0, 0, 1, time.FixedZone("west", -8*3600)),
	} {
		var ops []struct {
			Op    string          `json:"op"`
			Path  string          `json:"path"`
			Value json.RawMessage `json:"value"`
		}
		if err := json.Unmarshal(patch.at(now), &ops); err != nil {
			t.Fatalf("%v: patch is not JSON: %v: %s", now, err, patch.at(now))
		}
		last := ops[len(ops)-1]
		want, _ := json.Marshal(metav1.NewMicroTime(now))
		if len(ops) != 5 || last.Op != "replace" || last.Path != "/spec/renewTime" || string(last.Value) != string(want) {
			t.Errorf("%v: renewTime op %+v (value %s), want value %s", now, last, last.Value, want)
		}
		var back metav1.MicroTime
		if err := json.Unmarshal(last.Value, &back); err != nil || !back.Time.Equal(now.Truncate(time.Microsecond)) {
			t.Errorf("%v: reads back as %v (%v)", now, back, err)
		}
	}
}
