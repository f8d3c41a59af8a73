package topology

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
)

// FreePorts returns n distinct ports free on 127.0.0.1 now, below the
// kernel's ephemeral range. Members and API servers keep their ports
// across restarts: a port of the ephemeral range can be taken, while its
// member is down, by any connection dialled meanwhile (as its local port),
// and the restart then fails with "address already in use". Below the
// range only listeners that ask for the port take it; the ports are drawn
// at random, so that beds started together rarely draw the same one, and
// each is checked free by listening on it.
func FreePorts(n int) ([]int, error) {
	low, _, err := EphemeralRange()
	if err != nil {
		return nil, err
	}
	const floor = 10000 // clear of well-known and registered services' usual ports
	if low-floor < 100*n {
		return nil, fmt.Errorf("find free ports: the ephemeral range starts at %d, leaving too few ports above %d", low, floor)
	}
	var ports []int
	for tries := 0; len(ports) < n; tries++ {
		if tries > 1000 {
			return nil, fmt.Errorf("find free ports: %d of %d found below %d after %d tries", len(ports), n, low, tries)
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", floor+rand.IntN(low-floor)))
		if err != nil {
			continue // taken
		}
		defer ln.Close() // held until all are chosen: no port twice
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// EphemeralRange is the kernel's range of local ports for outgoing
// connections and listeners on port 0 (Linux's default when it cannot be
// read).
func EphemeralRange() (low, high int, err error) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if errors.Is(err, os.ErrNotExist) {
		return 32768, 60999, nil
	}
	if err != nil {
		return 0, 0, err
	}
	if _, err := fmt.Sscan(string(b), &low, &high); err != nil {
		return 0, 0, fmt.Errorf("ip_local_port_range %q: %w", b, err)
	}
	return low, high, nil
}
