//go:build k8s_lease_panic_inject

package lease

import "os"

// injectPanic panics at the named point when K8S_LEASE_PANIC_AT names it
// (read at each call). Built only with -tags k8s_lease_panic_inject, for the
// test that a panic inside the library reaches C as -1 and the process
// lives. Points: "call" (inside an exported call), "campaign" (an election's
// goroutine), "watch" (before a holder callback), "list" (the Lease watch).
func injectPanic(point string) {
	if os.Getenv("K8S_LEASE_PANIC_AT") == point {
		panic("injected panic at " + point)
	}
}
