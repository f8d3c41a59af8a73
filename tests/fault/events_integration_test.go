//go:build integration

package fault

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// A leader that stops gracefully the way our first user's master does
// (CancelElection on SIGTERM, then exit, never K8sLeaseShutdown) leaves its
// "stopped leading" Event on the Lease: CancelElection returns only once it
// is written.
func TestGracefulStopLeavesItsEvent(t *testing.T) {
	t.Parallel()
	s := newScenario(t, steady)
	admin, err := kubernetes.NewForConfig(server.Config)
	if err != nil {
		t.Fatal(err)
	}
	leader := s.start("graceful-0", candOpts{noShutdown: true})
	_, term := s.awaitLeader(30*time.Second, 0)
	s.sigterm(leader) // releases, then exits at once
	want := fmt.Sprintf("graceful-0 stopped leading: released (fencing token %d)", term.Token)
	evs, err := admin.CoreV1().Events(namespace).List(context.Background(), metav1.ListOptions{
		FieldSelector: "involvedObject.name=" + s.lease})
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	for _, ev := range evs.Items {
		if ev.Message == want {
			s.verify()
			return
		}
		seen = append(seen, ev.Message)
	}
	t.Fatalf("after the process exited, the Lease's Events were %q; want %q among them", strings.Join(seen, "; "), want)
}
