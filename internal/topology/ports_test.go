package topology

import (
	"math/rand/v2"
	"strings"
	"testing"
)

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

// A port stays reserved to the process that drew it, though nothing
// listens on it: a member's port, free while the member is down, must not
// go to another bed (seen in CI: a killed API server's restart found its
// port taken).
func TestADrawnPortIsNotDrawnAgain(t *testing.T) {
	var base int
	var first []int
	for try := 0; first == nil; try++ {
		if try == 100 {
			t.Fatal("no two free ports side by side in 100 tries")
		}
		base = 20000 + rand.IntN(10000)
		first, _ = freePortsIn(base, base+2, 2, 50) // nil: taken or reserved, try elsewhere
	}
	if first[0] == first[1] {
		t.Fatalf("port %d drawn twice in one call", first[0])
	}
	// Nothing listens on them now; they are still this process's.
	again, err := freePortsIn(base, base+2, 1, 50)
	if err == nil {
		t.Fatalf("ports %v drawn, then %v again", first, again)
	}
	if !strings.Contains(err.Error(), reservationName(base)) {
		t.Errorf("the error does not name how ports are reserved: %v", err)
	}
}
