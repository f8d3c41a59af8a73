package candidates

import (
	"errors"
	"slices"
	"testing"
	"time"

	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/k8s-lease/k8s-lease/internal/clientsetapi"
)

// The store is LeaseCandidates where discovery says they are served,
// Leases where it says they are not; either is fixed once known. A
// discovery error leaves it open: Leases this time, and ask again.
func TestRegistryPicksTheStoreOnceDiscoveryAnswers(t *testing.T) {
	t.Parallel() // own fake API servers
	served := []*metav1.APIResourceList{{GroupVersion: coordinationv1beta1.SchemeGroupVersion.String(),
		APIResources: []metav1.APIResource{{Name: "leasecandidates", Namespaced: true, Kind: "LeaseCandidate"}}}}
	for _, tc := range []struct {
		name      string
		resources []*metav1.APIResourceList
		failures  int
		want      []string // the kinds of successive picks
	}{
		{"served", served, 0, []string{"LeaseCandidate", "LeaseCandidate"}},
		{"not served", nil, 0, []string{"Lease", "Lease"}},
		{"served, after a discovery error", served, 1, []string{"Lease", "LeaseCandidate", "LeaseCandidate"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset()
			client.Resources = tc.resources
			asked, failures := 0, tc.failures
			client.PrependReactor("get", "resource", func(k8stesting.Action) (bool, kruntime.Object, error) {
				asked++
				if failures > 0 {
					failures--
					return true, nil, errors.New("connection refused (API server restarting)")
				}
				return false, nil, nil
			})
			var r Registry
			var got []string
			for range tc.want {
				got = append(got, r.StoreFor(clientsetapi.Wrap(client), time.Second, t.Logf).Kind())
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("picks %v, want %v", got, tc.want)
			}
			if asked != tc.failures+1 {
				t.Fatalf("discovery asked %d times, want %d", asked, tc.failures+1)
			}
		})
	}
}
