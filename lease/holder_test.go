package lease

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
)

func TestGetHolderFirstLook(t *testing.T) {
	tests := []struct {
		name  string
		lease *coordinationv1.Lease
		want  HolderState
	}{
		{"not found", nil, HolderState{}},
		{"empty holder (released)", testLease("l", "", 4, testNow, 1), HolderState{Token: 4, Exists: true}},
		// renewTime is the holder's wall clock, which may be skewed: a first
		// look reports the holder until a lease duration after this process
		// saw the record, as a campaign would wait.
		{"renewTime long past", testLease("l", "a", 4, testNow.Add(-20*time.Second), 15), HolderState{Holder: "a", Token: 4, Exists: true}},
		{"active", testLease("l", "a", 4, testNow.Add(-2*time.Second), 15), HolderState{Holder: "a", Token: 4, Exists: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var objs []runtime.Object
			if tt.lease != nil {
				objs = append(objs, tt.lease)
			}
			m, _, _ := fakeManager(objs...)
			defer func() { _ = m.Shutdown(5 * time.Second) }()
			got, err := m.GetHolder("ns", "l")
			if err != nil || got != tt.want {
				t.Errorf("GetHolder = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func TestGetHolderAPIErrorAndBadInput(t *testing.T) {
	m, client, _ := fakeManager()
	defer func() { _ = m.Shutdown(5 * time.Second) }()
	client.PrependReactor("list", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("boom")
	})
	if _, err := m.GetHolder("ns", "l"); err == nil || !strings.Contains(err.Error(), "get lease ns/l: boom") {
		t.Fatalf("GetHolder error = %v", err)
	}
	if _, err := m.GetHolder("NS", "l"); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("bad namespace: %v", err)
	}
	noConfig(t)
	if _, err := NewManager(nil).GetHolder("ns", "l"); !errors.Is(err, ErrNoConfig) {
		t.Fatalf("no configuration: %v", err)
	}
}

func TestGetHolderObservedUsesMonotonicExpiry(t *testing.T) {
	// A holder whose wall clock runs an hour behind: renewTime looks
	// expired, but this process saw the record just now, so it is valid
	// until a lease duration after that, by the local monotonic clock.
	m, client, clk := fakeManager(testLease("l", "a", 2, testNow.Add(-time.Hour), 10))
	defer func() { _ = m.Shutdown(5 * time.Second) }()
	if got, err := m.GetHolder("ns", "l"); err != nil || got.Holder != "a" {
		t.Fatalf("observed lease with skewed renewTime: %+v, %v; want holder a", got, err)
	}
	clk.Step(10 * time.Second)
	if got, err := m.GetHolder("ns", "l"); err != nil || got.Holder != "" || got.Token != 2 {
		t.Fatalf("after a lease duration without change: %+v, %v; want no holder", got, err)
	}
	if n := countVerbs(t, client.Actions())["get"]; n != 0 {
		t.Fatalf("GetHolder made %d GETs; want answers from the observer", n)
	}
}

func TestConcurrentGetHolderFake(t *testing.T) {
	m, _, _ := fakeManager(testLease("l", "a", 1, testNow, 15))
	var wg sync.WaitGroup
	for i := 0; i < 16; i++ {
		wg.Go(func() {
			for j := 0; j < 50; j++ {
				if got, err := m.GetHolder("ns", "l"); err != nil || got.Holder != "a" {
					t.Errorf("GetHolder = %+v, %v", got, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestKeyFormat(t *testing.T) {
	if got := (Key{"ns", "lease"}).String(); got != "ns/lease" {
		t.Fatalf("Key.String = %q", got)
	}
}
