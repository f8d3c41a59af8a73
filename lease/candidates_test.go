package lease

import (
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/clock"

	"github.com/k8s-lease/k8s-lease/internal/clientsetapi"
)

func TestCompareVersions(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"1.2.3", "1.2.3", 0},
		{"v1.2.3", "1.2.3", 0},
		{"1.10.0", "1.9.9", 1},
		{"1.2.3", "1.2.4", -1},
		{"1.2.3-rc.1", "1.2.3", -1},
		{"1.0.0", "", 1},
		{"", "", 0},
		{"not-a-version", "0.0.1", -1},
	} {
		t.Run(tc.a+" vs "+tc.b, func(t *testing.T) {
			if got := compareVersions(tc.a, tc.b); got != tc.want {
				t.Fatalf("compareVersions = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestBestCandidate(t *testing.T) {
	now := time.Unix(10000, 0)
	cs := []Candidate{
		{Identity: "old", Version: "1.0.0", Priority: 9, RenewTime: now},
		{Identity: "new-low", Version: "2.0.0", Priority: 1, RenewTime: now},
		{Identity: "new-high", Version: "2.0.0", Priority: 5, RenewTime: now},
		{Identity: "newest-stale", Version: "3.0.0", RenewTime: now.Add(-candidateTTL - time.Second)},
	}
	for _, tc := range []struct {
		name      string
		exclude   string
		onlyNewer bool
		own       string
		want      string
	}{
		{"newest live, then priority", "", false, "", "new-high"},
		{"never the excluded one", "new-high", false, "", "new-low"},
		{"only newer than own", "", true, "2.0.0", ""},
		{"newer than an old own version", "old", true, "1.0.0", "new-high"},
		{"own version none: any declared is newer", "", true, "", "new-high"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, ok := bestCandidate(cs, tc.exclude, tc.onlyNewer, tc.own, now)
			if got := map[bool]string{true: c.Identity, false: ""}[ok]; got != tc.want {
				t.Fatalf("best = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestElectionOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts ElectionOptions
		want string // "" : valid
	}{
		{"none", ElectionOptions{}, ""},
		{"semantic version", ElectionOptions{Version: "v1.4.2", Priority: -3, Policy: PolicyHandOffOnCancel | PolicyYieldToNewer}, ""},
		{"not a version", ElectionOptions{Version: "latest"}, `version "latest"`},
		{"unknown policy flag", ElectionOptions{Policy: 8}, "unknown flags 8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.opts.validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatal(err)
			case tc.want != "" && (!errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("validate = %v, want an invalid argument naming %s", err, tc.want)
			}
		})
	}
}

func TestCandidateRecordNames(t *testing.T) {
	long := strings.Repeat("a", 253)
	for _, tc := range []struct{ lease, identity string }{{"l", "pod-0"}, {long, "pod-0"}, {"l", strings.Repeat("x", 1000)}} {
		t.Run(clip(tc.lease)+"/"+clip(tc.identity), func(t *testing.T) {
			name := candidateRecordName(tc.lease, tc.identity)
			if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
				t.Fatalf("%q: %v", name, errs)
			}
			if candidateRecordName(tc.lease, tc.identity+"x") == name {
				t.Fatal("two identities, one record name")
			}
			if errs := validation.IsValidLabelValue(candidateOfValue(tc.lease)); len(errs) > 0 {
				t.Fatalf("label value: %v", errs)
			}
		})
	}
}

// candidates is three processes on one fake API server, each with options.
func candidates(t *testing.T, opts map[string]ElectionOptions, ids ...string) (map[string]*Manager, map[string]*Election, *fake.Clientset) {
	t.Helper()
	client := fake.NewClientset()
	ms, es := map[string]*Manager{}, map[string]*Election{}
	for i, id := range ids {
		m := NewManager(clock.RealClock{})
		m.SetClient(clientsetapi.Wrap(client))
		m.SetEvents(false)
		t.Cleanup(func() { _ = m.Shutdown(5 * time.Second) })
		e, err := m.RunElectionWith("ns", "l", id, fastUnitTiming, opts[id])
		if err != nil {
			t.Fatal(err)
		}
		ms[id], es[id] = m, e
		if i == 0 {
			if _, err := e.WaitElected(5 * time.Second); err != nil {
				t.Fatal(err)
			}
		}
	}
	eventually(t, 5*time.Second, "every candidate recorded", func() bool {
		cs, err := ms[ids[0]].Candidates("ns", "l")
		return err == nil && len(cs) == len(ids)
	})
	return ms, es, client
}

func TestPolicyHandOffOnCancel(t *testing.T) {
	ms, es, _ := candidates(t, map[string]ElectionOptions{
		"a": {Version: "1.0.0", Policy: PolicyHandOffOnCancel},
		"b": {Version: "1.0.0", Priority: 1}, "c": {Version: "1.1.0"},
	}, "a", "b", "c")
	if err := ms["a"].CancelElection("ns", "l"); err != nil {
		t.Fatal(err)
	}
	if _, err := es["c"].WaitElected(time.Second); err != nil {
		t.Fatalf("the newest candidate did not take over: %v", err)
	}
	if ok, _, _ := es["b"].IsLeader(); ok {
		t.Fatal("b leads")
	}
	if err := es["a"].WaitLost(); err != nil {
		t.Fatalf("the cancelled leader's WaitLost = %v, want nil", err)
	}
}

func TestPolicyYieldToNewer(t *testing.T) {
	_, es, client := candidates(t, map[string]ElectionOptions{
		"a": {Version: "1.0.0", Policy: PolicyYieldToNewer}, "b": {Version: "1.0.0"},
	}, "a", "b")
	time.Sleep(200 * time.Millisecond) // a candidate of the same version is no reason to move
	if ok, _, _ := es["a"].IsLeader(); !ok {
		t.Fatal("a does not lead")
	}
	m := NewManager(clock.RealClock{})
	m.SetClient(clientsetapi.Wrap(client))
	m.SetEvents(false)
	t.Cleanup(func() { _ = m.Shutdown(5 * time.Second) })
	newer, err := m.RunElectionWith("ns", "l", "n", fastUnitTiming, ElectionOptions{Version: "1.1.0"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := newer.WaitElected(5 * time.Second); err != nil {
		t.Fatalf("the newer version did not get the lease: %v", err)
	}
	lost := es["a"].WaitLost()
	if !errors.Is(lost, ErrHandedOff) || !strings.Contains(lost.Error(), "to n") {
		t.Fatalf("the old leader's WaitLost = %v, want a hand-off to n", lost)
	}
	if ok, _, _ := es["b"].IsLeader(); ok {
		t.Fatal("b leads")
	}
}

func TestPreferredHolderAnnotation(t *testing.T) {
	_, es, client := candidates(t, nil, "a", "b", "c")
	l, err := client.CoordinationV1().Leases("ns").Get(t.Context(), "l", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l.Annotations[PreferredHolderAnnotation] = "c" // kubectl annotate lease l k8s-lease.io/preferred-holder=c
	if _, err := client.CoordinationV1().Leases("ns").Update(t.Context(), l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := es["c"].WaitElected(5 * time.Second); err != nil {
		t.Fatalf("the preferred holder did not get the lease: %v", err)
	}
	if lost := es["a"].WaitLost(); !errors.Is(lost, ErrHandedOff) {
		t.Fatalf("the old leader's WaitLost = %v, want a hand-off", lost)
	}
	if ok, _, _ := es["b"].IsLeader(); ok {
		t.Fatal("b leads")
	}
}
