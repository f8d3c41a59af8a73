package lease

import (
	"math/rand/v2"
	"sync/atomic"
	"time"
)

// The state of package lease that is the process's, not a Manager's: it
// paces the load that the process puts on the API server, and the API
// server sees one process, however many Managers it runs (a host program
// has one; tests have many). Everything else is a Manager's. Outside this
// package, the log sink (lease/internal/logs: the host installs one per
// process) and the count of API requests (lease/internal/telemetry: counted
// where a client is built, which knows no Manager) are process-wide too.

// leading counts the elections of the process that lead now: the number of
// renewal slots grows with it (renewalSlot).
var leading atomic.Int64

// gridPhase offsets this process's grid of renewal slots, so that the bursts
// of processes (one election each, many pods) do not meet at the API server.
var gridPhase = rand.Int64N(int64(time.Hour))

// renewers run the renewals of every election in the process (workers.go):
// one pool, so a burst of renewals wakes the process once.
var renewers = newWorkers(workerIdle)

// firstRounds admits the first rounds of requests of new elections, at most
// firstRoundsAtOnce at a time (firstrounds.go says why).
var firstRounds = newGate(firstRoundsAtOnce)
