package topology

import "testing"

// The ports of members and API servers are kept across their restarts, so
// they must not come from the kernel's ephemeral range: a connection
// dialled while a member is down can take its port as its own local port,
// and the member's restart then fails with "address already in use" (seen
// in CI: TestHAStopAfterMajorityRestarted).
func TestFixedPortsAreOutsideTheEphemeralRange(t *testing.T) {
	low, high, err := EphemeralRange()
	if err != nil {
		t.Fatal(err)
	}
	ports, err := FreePorts(8)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if p >= low && p <= high {
			t.Errorf("port %d is in the ephemeral range %d-%d", p, low, high)
		}
		if seen[p] {
			t.Errorf("port %d chosen twice", p)
		}
		seen[p] = true
	}
}
