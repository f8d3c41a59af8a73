//go:build k8s_lease_panic_inject

package lease

import "os"

// injectPanic panics at the named point when K8S_LEASE_PANIC_AT names it
// (read at each call). Built only with -tags k8s_lease_panic_inject, for the
// test that a panic inside the library reaches C as -1 and the process
// lives. Points: "call" (inside an exported call), "campaign" (an election's
// goroutine), "watch" (before a holder callback), "list" (the Lease watch's
// list), "event" (a Lease watch event), "renew" (a renewal's goroutine),
// "release" (the release after a cancel, also on Shutdown's goroutines),
// "publish" (a write of the leader's endpoint, K8sLeasePublishEndpoint),
// "handoff" (a hand-off as it begins, the Manager's lock held).
func injectPanic(point string) {
	if os.Getenv("K8S_LEASE_PANIC_AT") == point {
		panic("injected panic at " + point)
	}
}
