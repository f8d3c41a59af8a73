//go:build integration

package fault

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/k8s-lease/k8s-lease/internal/history"
)

// Someone else writes the held Lease: deletes it, hands it to another
// holder, shortens its duration. The leader reports why, nobody overlaps.
func TestForeignWritesOnHeldLease(t *testing.T) {
	t.Parallel()
	s := newScenario(t, steady)
	for i := 0; i < 2; i++ {
		s.start(fmt.Sprintf("foreign-%d", i), candOpts{})
	}
	client, err := server.Client()
	if err != nil {
		t.Fatal(err)
	}
	leases := client.CoordinationV1().Leases(namespace)
	ctx := context.Background()
	edits := []struct {
		name   string
		write  func() error
		reason string
	}{
		{"lease deleted", func() error { return leases.Delete(ctx, s.lease, metav1.DeleteOptions{}) }, "lease deleted by another writer"},
		{"holder edited", func() error {
			return editLease(ctx, leases.Get, leases.Update, s.lease, func(l *coordinationv1.Lease) {
				l.Spec.HolderIdentity = ptr.To("intruder")
			})
		}, "lease taken by another holder"},
		{"leaseDurationSeconds edited down", func() error {
			return editLease(ctx, leases.Get, leases.Update, s.lease, func(l *coordinationv1.Lease) {
				l.Spec.LeaseDurationSeconds = ptr.To(int32(1))
			})
		}, "lease record edited by another writer"},
	}
	since := int64(0)
	for _, edit := range edits {
		leader, term := s.awaitLeader(s.timing.lease+s.timing.renew+15*time.Second, since)
		time.Sleep(700 * time.Millisecond)
		at := history.Now()
		if err := edit.write(); err != nil {
			t.Fatalf("%s: %v", edit.name, err)
		}
		ended := s.awaitTermEnd(s.timing.renew+2*time.Second, leader.pid(), term.Token)
		t.Logf("%s: leader %s stepped down %v later: %s %q", edit.name, leader.id,
			time.Duration(ended.Until()-at).Round(time.Millisecond), ended.EndKind, ended.Reason)
		if ended.EndKind != history.Lost || !strings.Contains(ended.Reason, edit.reason) {
			t.Errorf("%s: term ended by %s %q, want lost with %q", edit.name, ended.EndKind, ended.Reason, edit.reason)
		}
		since = at
	}
	s.awaitLeader(s.timing.lease+s.timing.renew+15*time.Second, since)
	s.stopAll()
	s.verify()
}

func editLease(ctx context.Context,
	get func(context.Context, string, metav1.GetOptions) (*coordinationv1.Lease, error),
	update func(context.Context, *coordinationv1.Lease, metav1.UpdateOptions) (*coordinationv1.Lease, error),
	name string, edit func(*coordinationv1.Lease)) error {
	for attempt := 0; attempt < 5; attempt++ { // the leader renews meanwhile
		l, err := get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		edit(l)
		if _, err = update(ctx, l, metav1.UpdateOptions{}); err == nil {
			return nil
		}
	}
	return fmt.Errorf("lease %s kept changing under the edit", name)
}

// Three live processes share one identity: never two leaders.
func TestDuplicateIdentityInLiveProcesses(t *testing.T) {
	t.Parallel()
	s := newScenario(t, quick)
	for i := 0; i < 3; i++ {
		s.start("same-identity", candOpts{hold: "50-300"})
	}
	time.Sleep(15 * time.Second)
	s.stopAll()
	r := s.verify()
	pids := map[int]bool{}
	for _, term := range r.Terms {
		pids[term.PID] = true
	}
	if len(r.Terms) < 5 || len(pids) < 2 {
		t.Errorf("%d leaderships by %d processes: too few to judge", len(r.Terms), len(pids))
	}
}
