package topology

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"sync"
	"syscall"
)

// FreePorts returns n distinct ports free on 127.0.0.1 now, below the
// kernel's ephemeral range, and reserved for this process. Members and API
// servers keep their ports across restarts: a port of the ephemeral range
// can be taken, while its member is down, by any connection dialled
// meanwhile (as its local port), and the restart then fails with "address
// already in use". Below the range only listeners that ask for the port
// take it; the ports are drawn at random and each is checked free by
// listening on it. A port free only because its member is down must not
// be drawn by another bed (seen in CI: an API server's restart found its
// port taken by a bed started meanwhile), so each port drawn is reserved
// for the life of the process (see reserve), and a port another process
// reserved is not drawn.
func FreePorts(n int) ([]int, error) {
	low, _, err := EphemeralRange()
	if err != nil {
		return nil, err
	}
	const floor = 10000 // clear of well-known and registered services' usual ports
	if low-floor < 100*n {
		return nil, fmt.Errorf("find free ports: the ephemeral range starts at %d, leaving too few ports above %d", low, floor)
	}
	return freePortsIn(floor, low, n, 1000)
}

// freePortsIn draws n ports of [from, to) in at most tries draws.
func freePortsIn(from, to, n, tries int) ([]int, error) {
	var ports []int
	for try := 0; len(ports) < n; try++ {
		if try >= tries {
			return nil, fmt.Errorf("find free ports: %d of %d found in %d-%d after %d tries (the others listened on, or reserved by a process: %s)",
				len(ports), n, from, to-1, tries, reservationName(from))
		}
		port := from + rand.IntN(to-from)
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue // taken
		}
		defer ln.Close() // held until all are chosen: no port twice
		ok, err := reserve(port)
		if err != nil {
			return nil, err
		}
		if ok {
			ports = append(ports, port)
		}
	}
	return ports, nil
}

var (
	reservedMu sync.Mutex
	reserved   []net.Listener // held, and so the names taken, until the process exits
)

// reservationName is the name of port's reservation: a Unix socket in
// Linux's abstract namespace, which is the machine's (its network
// namespace's, as the ports are), holds no file, and is let go by the
// kernel when the process exits, however it exits.
func reservationName(port int) string { return "@k8s-lease-port-" + strconv.Itoa(port) }

// reserve takes port for this process, unless another process (or an
// earlier call of this one) has it.
func reserve(port int) (bool, error) {
	ln, err := net.Listen("unix", reservationName(port))
	if errors.Is(err, syscall.EADDRINUSE) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reserve port %d: %w", port, err)
	}
	reservedMu.Lock()
	reserved = append(reserved, ln)
	reservedMu.Unlock()
	return true, nil
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
