package lease

import (
	"testing"
	"time"
)

// eventually polls cond every 10 ms until it holds or within passes. Unit
// and integration tests share it.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
