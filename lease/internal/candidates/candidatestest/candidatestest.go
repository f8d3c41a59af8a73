// Package candidatestest steers a fake API server's requests on candidate
// records, for the tests of package candidates and of package lease. Tests
// only; it must not import package lease.
package candidatestest

import (
	"sync/atomic"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// ObjectName is the name a get, create, update, delete or patch action is
// about.
func ObjectName(a k8stesting.Action) string {
	switch act := a.(type) {
	case k8stesting.GetAction:
		return act.GetName()
	case k8stesting.CreateAction:
		if o, ok := act.GetObject().(metav1.Object); ok {
			return o.GetName()
		}
	case k8stesting.UpdateAction:
		if o, ok := act.GetObject().(metav1.Object); ok {
			return o.GetName()
		}
	case k8stesting.DeleteAction:
		return act.GetName()
	case k8stesting.PatchAction:
		return act.GetName()
	}
	return ""
}

// DeleteBefore makes a predecessor candidacy's delete of the record name
// land at one exact point: just before the first verb ("get" or "update")
// of that record on resource. It reports whether it landed. Reactors run
// under the fake's lock, in order: the delete is done on the tracker, and
// the action then proceeds on the deleted record.
func DeleteBefore(t testing.TB, client *fake.Clientset, verb, resource, name string) *atomic.Bool {
	t.Helper()
	var landed atomic.Bool
	client.PrependReactor(verb, resource, func(a k8stesting.Action) (bool, kruntime.Object, error) {
		if ObjectName(a) == name && landed.CompareAndSwap(false, true) {
			if err := client.Tracker().Delete(a.GetResource(), a.GetNamespace(), name); err != nil {
				t.Errorf("the predecessor's delete: %v", err)
			}
		}
		return false, nil, nil
	})
	return &landed
}
