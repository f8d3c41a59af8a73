// Package blackhole is the switch behind the fault proxies' black holes
// (internal/faultproxy's, at the HTTP level, and internal/tcpproxy's, at
// the TCP level): while it is on, traffic waits on it; Heal releases what
// waits.
package blackhole

import "sync"

// Switch is off (traffic passes) until On. The zero value is off. Its
// methods are safe for concurrent use.
type Switch struct {
	mu   sync.Mutex
	hole chan struct{} // non-nil while on; closed by Heal
}

// On starts a black hole (if none is on).
func (s *Switch) On() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hole == nil {
		s.hole = make(chan struct{})
	}
}

// Heal ends the black hole, releasing what waits in it, and reports
// whether one was on.
func (s *Switch) Heal() bool {
	s.mu.Lock()
	hole := s.hole
	s.hole = nil
	s.mu.Unlock()
	if hole != nil {
		close(hole)
	}
	return hole != nil
}

// Hole is nil while the switch is off, else a channel the Heal that ends
// this black hole closes.
func (s *Switch) Hole() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hole
}

// Pass waits while the switch is on (through one black hole and any that
// starts before this one's release is seen); false if abort closes first.
func (s *Switch) Pass(abort <-chan struct{}) bool {
	for {
		hole := s.Hole()
		if hole == nil {
			return true
		}
		select {
		case <-hole:
		case <-abort:
			return false
		}
	}
}
