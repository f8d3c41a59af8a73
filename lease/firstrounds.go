package lease

import (
	"sync"
	"sync/atomic"
)

// firstRounds admits the elections of the process (every Manager's, as
// renewers serves them all) to their first round of requests - the
// observer's list, then the first acquisition, with the watch the observer
// opens meanwhile - at most firstRoundsAtOnce at a time; the others wait
// for a place, in the order they asked. An election leaves as soon as its
// first round has an outcome: it leads, it waits as a standby, or a request
// failed, so that a lease it cannot read or write does not keep the others
// out (client-go bounds every request by its context: requestTimeout; a
// client that ignored it could keep a place).
//
// Why: a process that starts many elections at once otherwise sends all
// their lists, watches and writes together. At 1000 elections that burst
// peaked near 4700 goroutines and dozens of new connections, and its memory
// stayed: Go keeps goroutine descriptors, and the survivors' stacks end up
// scattered over stack spans that never become free. Measured in a Go
// program starting 1000 elections: RSS 64.5 MB unbounded against 44.8 MB
// with 16 at a time (goroutine stacks 15.6 against 8 MB), all 1000 elected
// in 4.6 s against 4.9 s (the API server is the bound either way); 8 at a
// time took 7.1 s.
//
// Only an election's first round waits: its renewals, retries and
// takeover as a standby never do, and one election alone never waits. A
// Lease the process already follows (a holder watch, GetHolder, an ending
// election of the same lease) keeps its observer running outside the gate.
// An election queued here counts its wait in its campaign's time and, if
// WaitElected times out, says it was queued. The gate is firstRounds
// (process.go).
const firstRoundsAtOnce = 16

// firstRoundState is an election's place among the first rounds.
type firstRoundState struct {
	// gate admits the election to its first round; over leaves it once
	// that round has an outcome (run's goroutine only). nil: no gate (unit
	// tests that build elections by hand).
	gate     *gate
	over     func()
	admitted atomic.Bool // past gate: it has sent or may send requests
}

// gate is a counting semaphore.
type gate struct{ slots chan struct{} }

func newGate(n int) *gate { return &gate{slots: make(chan struct{}, n)} }

// enter waits for a slot, or for done to close (ok false, nothing held).
// leave gives the slot back; calling it again does nothing.
func (g *gate) enter(done <-chan struct{}) (leave func(), ok bool) {
	select {
	case g.slots <- struct{}{}:
	case <-done:
		return nil, false
	}
	var once sync.Once
	return func() { once.Do(func() { <-g.slots }) }, true
}
