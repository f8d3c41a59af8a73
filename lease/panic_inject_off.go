//go:build !k8s_lease_panic_inject

package lease

// injectPanic is a no-op in every real build; see panic_inject_on.go.
func injectPanic(string) {}
