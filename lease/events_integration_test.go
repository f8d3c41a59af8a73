//go:build integration

package lease

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/k8s-lease/k8s-lease/internal/testenv"
)

// waitLeaseEvent waits for the Event with this type and message on the
// Lease name, listed as `kubectl get events --field-selector
// involvedObject.name=NAME` lists them, and checks what it refers to.
func waitLeaseEvent(t *testing.T, name string, uid types.UID, identity, eventType, message string) {
	t.Helper()
	var seen []corev1.Event
	eventually(t, 5*time.Second, fmt.Sprintf("Event %s %q on lease %s", eventType, message, name), func() bool {
		list, err := itAdmin.CoreV1().Events(itNamespace).List(context.Background(),
			metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
		if err != nil {
			t.Fatal(err)
		}
		seen = list.Items
		for _, ev := range list.Items {
			if ev.Message == message {
				return true
			}
		}
		return false
	})
	for _, ev := range seen {
		if ev.Message != message {
			continue
		}
		ref := ev.InvolvedObject
		if ev.Type != eventType || ev.Reason != "LeaderElection" || ev.Source.Component != "k8s-lease" ||
			ev.Source.Host != identity || ev.ReportingController != "k8s-lease" || ev.ReportingInstance != identity ||
			ref.APIVersion != "coordination.k8s.io/v1" || ref.Kind != "Lease" || ref.Namespace != itNamespace ||
			ref.Name != name || ref.UID != uid || ev.Count != 1 {
			t.Fatalf("Event %q: type %s reason %s source %+v reporting %s/%s involvedObject %+v count %d; want %s LeaderElection from k8s-lease/%s on Lease %s/%s uid %s",
				message, ev.Type, ev.Reason, ev.Source, ev.ReportingController, ev.ReportingInstance, ref, ev.Count,
				eventType, identity, itNamespace, name, uid)
		}
	}
}

func leaseUID(t *testing.T, name string) types.UID {
	t.Helper()
	l, err := itAdmin.CoordinationV1().Leases(itNamespace).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return l.UID
}

// kubectl runs the test bed's kubectl on the test API server, or skips
// when it is not there.
func kubectl(t *testing.T, args ...string) string {
	t.Helper()
	bin := filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kubectl")
	if _, err := os.Stat(bin); err != nil {
		t.Logf("no kubectl in KUBEBUILDER_ASSETS (%v): kubectl check skipped", err)
		return ""
	}
	out, err := exec.Command(bin, append([]string{"--kubeconfig", itServer.Kubeconfig, "-n", itNamespace}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// Every change of leadership leaves an Event on the Lease, in client-go's
// wording, visible with kubectl describe lease and kubectl get events.
func TestLeadershipEvents(t *testing.T) {
	t.Run("election", func(t *testing.T) {
		m := newProcess(t)
		name := leaseName(t)
		token := mustElect(t, mustRun(t, m, name, "ev-a"), 10*time.Second)
		waitLeaseEvent(t, name, leaseUID(t, name), "ev-a", corev1.EventTypeNormal, fmt.Sprintf("ev-a became leader (fencing token %d)", token))
		if out := kubectl(t, "describe", "lease", name); out != "" && !strings.Contains(out, "LeaderElection") {
			t.Fatalf("kubectl describe lease shows no LeaderElection Event:\n%s", out)
		} else {
			t.Logf("kubectl describe lease %s:\n%s", name, out)
		}
	})

	t.Run("hand-off", func(t *testing.T) {
		a, b := newProcess(t), newProcess(t)
		name := leaseName(t)
		ea := mustRun(t, a, name, "ev-a")
		tokenA := mustElect(t, ea, 10*time.Second)
		eb := mustRun(t, b, name, "ev-b")
		if err := ea.Cancel(); err != nil {
			t.Fatal(err)
		}
		tokenB := mustElect(t, eb, 5*time.Second)
		uid := leaseUID(t, name)
		waitLeaseEvent(t, name, uid, "ev-a", corev1.EventTypeNormal, fmt.Sprintf("ev-a became leader (fencing token %d)", tokenA))
		waitLeaseEvent(t, name, uid, "ev-a", corev1.EventTypeNormal, fmt.Sprintf("ev-a stopped leading: released (fencing token %d)", tokenA))
		waitLeaseEvent(t, name, uid, "ev-b", corev1.EventTypeNormal, fmt.Sprintf("ev-b became leader (fencing token %d)", tokenB))
		t.Logf("kubectl get events --field-selector involvedObject.name=%s:\n%s", name,
			kubectl(t, "get", "events", "--field-selector", "involvedObject.name="+name))
	})

	for _, tc := range []struct {
		name  string
		force func(t *testing.T, lease string)
		want  string // the loss reason's start
	}{
		{"taken", func(t *testing.T, lease string) {
			intruder := "intruder" // retried when ev-c's renewal wins the race
			editLease(t, lease, func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = &intruder })
		}, "lease taken by another holder"},
		{"deleted", func(t *testing.T, lease string) {
			if err := itAdmin.CoordinationV1().Leases(itNamespace).Delete(context.Background(), lease, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}, "lease deleted by another writer"},
	} {
		t.Run("forced loss, "+tc.name, func(t *testing.T) {
			m := newProcess(t)
			name := leaseName(t)
			e := mustRun(t, m, name, "ev-c")
			token := mustElect(t, e, 10*time.Second)
			uid := leaseUID(t, name)
			tc.force(t, name)
			lost := make(chan error, 1)
			go func() { lost <- e.WaitLost() }()
			var reason error
			select {
			case reason = <-lost:
			case <-time.After(5 * time.Second):
				t.Fatal("the leader did not lose its lease")
			}
			if reason == nil || !strings.HasPrefix(reason.Error(), tc.want) {
				t.Fatalf("WaitLost = %v, want %q", reason, tc.want)
			}
			waitLeaseEvent(t, name, uid, "ev-c", corev1.EventTypeWarning, fmt.Sprintf("ev-c stopped leading: %v (fencing token %d)", reason, token))
			t.Logf("kubectl get events --field-selector involvedObject.name=%s:\n%s", name,
				kubectl(t, "get", "events", "--field-selector", "involvedObject.name="+name))
		})
	}

	// A Role with the lease verbs but nothing on events: the election is as
	// usual, and the only sign is one warning log (rate-limited), no error.
	t.Run("no events permission", func(t *testing.T) {
		sa := fmt.Sprintf("ev-noevents-%d", itSeq.Add(1))
		createServiceAccount(t, sa)
		grantLeases(t, sa)
		logs := &capturedLogs{}
		SetLogSink(logs.sink)
		t.Cleanup(func() { SetLogSink(nil) })
		m := newProcessWithConfig(t, serviceAccountConfig(t, sa))
		name := leaseName(t)
		for want := int64(1); want <= 2; want++ {
			e := mustRun(t, m, name, "ev-d")
			if token := mustElect(t, e, 10*time.Second); token != want {
				t.Fatalf("term %d: token %d", want, token)
			}
			if err := e.Cancel(); err != nil {
				t.Fatalf("release: %v", err)
			}
			if h := getLease(t, name).holder; h != "" {
				t.Fatalf("after Cancel the lease is held by %q", h)
			}
		}
		if err := m.Shutdown(10 * time.Second); err != nil {
			t.Fatal(err)
		}
		flushLogs()
		logs.mu.Lock()
		defer logs.mu.Unlock()
		var warnings []string
		for _, msg := range logs.msgs {
			// Lines about anything else may come from the elections
			// themselves (a list cut short by the next term's pause).
			about := strings.Contains(strings.ToLower(msg), "event")
			switch {
			case strings.HasPrefix(msg, "E ") && about:
				t.Errorf("an error log: %s", msg)
			case strings.HasPrefix(msg, "W ") && strings.Contains(msg, "Kubernetes Event"):
				warnings = append(warnings, msg)
			case strings.HasPrefix(msg, "W ") && about:
				t.Errorf("an unexpected warning: %s", msg)
			}
		}
		if len(warnings) != 1 || !strings.Contains(warnings[0], "forbidden") || !strings.Contains(warnings[0], "create on events") {
			t.Fatalf("want exactly one warning naming the forbidden events and the fix, got %q", warnings)
		}
		t.Logf("the one warning: %s", warnings[0])
		list, err := itAdmin.CoreV1().Events(itNamespace).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Items) != 0 {
			t.Fatalf("%d Events recorded without the permission", len(list.Items))
		}
	})
	// The Role of deploy/rbac.yaml (for a lease of this test's name) is
	// enough for the Events, which are only ever created: twelve terms'
	// worth, each its own Event (client-go's recorder would have
	// aggregated them from the 10th on, and needed patch).
	t.Run("deploy/rbac.yaml", func(t *testing.T) {
		name := leaseName(t)
		sa := fmt.Sprintf("ev-deployed-%d", itSeq.Add(1))
		createServiceAccount(t, sa)
		grantDeployedRole(t, sa, name)
		logs := &capturedLogs{}
		SetLogSink(logs.sink)
		t.Cleanup(func() { SetLogSink(nil) })
		m := newProcessWithConfig(t, serviceAccountConfig(t, sa))
		const terms = 6 // 12 Normal Events
		for i := 0; i < terms; i++ {
			e := mustRun(t, m, name, "ev-e")
			mustElect(t, e, 10*time.Second)
			if err := e.Cancel(); err != nil {
				t.Fatal(err)
			}
		}
		waitLeaseEvent(t, name, leaseUID(t, name), "ev-e", corev1.EventTypeNormal, "ev-e became leader (fencing token 1)")
		eventually(t, 5*time.Second, "12 Events, one per change", func() bool {
			list, err := itAdmin.CoreV1().Events(itNamespace).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
			if err != nil {
				t.Fatal(err)
			}
			messages := map[string]bool{}
			for _, ev := range list.Items {
				if ev.Count == 1 && ev.Source.Host == "ev-e" && ev.ReportingController == "k8s-lease" {
					messages[ev.Message] = true
				}
			}
			return len(messages) == 2*terms
		})
		flushLogs()
		logs.mu.Lock()
		defer logs.mu.Unlock()
		for _, msg := range logs.msgs {
			// Only the Events' lines: the rapid re-elections may log
			// others (a list cut short by the next term's pause).
			if (strings.HasPrefix(msg, "E ") || strings.HasPrefix(msg, "W ")) && strings.Contains(strings.ToLower(msg), "event") {
				t.Errorf("logged with the Role of deploy/rbac.yaml: %s", msg)
			}
		}
		t.Logf("kubectl get events --field-selector involvedObject.name=%s:\n%s", name,
			kubectl(t, "get", "events", "--field-selector", "involvedObject.name="+name))
	})
}

// grantDeployedRole binds to the ServiceAccount a copy of the Role in
// deploy/rbac.yaml, for the lease named lease instead of metadata-master.
func grantDeployedRole(t *testing.T, sa, lease string) {
	t.Helper()
	objs, err := testenv.Manifest("rbac.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range objs {
		role, ok := obj.(*rbacv1.Role)
		if !ok {
			continue
		}
		if !slices.ContainsFunc(role.Rules, func(r rbacv1.PolicyRule) bool { return slices.Contains(r.Resources, "events") }) {
			t.Fatal("the Role of deploy/rbac.yaml has no rule on events")
		}
		for i := range role.Rules {
			for j, n := range role.Rules[i].ResourceNames {
				if n == "metadata-master" {
					role.Rules[i].ResourceNames[j] = lease
				}
			}
		}
		role.ObjectMeta = metav1.ObjectMeta{Name: sa, Namespace: itNamespace}
		if _, err := itAdmin.RbacV1().Roles(itNamespace).Create(context.Background(), role, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		bindRole(t, sa)
		return
	}
	t.Fatal("no Role in deploy/rbac.yaml")
}
