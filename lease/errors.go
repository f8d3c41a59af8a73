package lease

import (
	"errors"
	"fmt"
	"runtime/debug"

	"github.com/k8s-lease/k8s-lease/lease/internal/validate"
)

// Sentinel errors, matched with errors.Is. Messages returned to C start with
// the wrapped detail, so the sentinel names the area and the detail the cause.
var (
	// ErrInvalidArgument: an argument broke a rule; nothing was sent.
	ErrInvalidArgument = validate.ErrInvalidArgument
	// ErrNoConfig: no cluster configuration was found (every function
	// that needs the cluster loads it on first use; see LoadConfig).
	ErrNoConfig = errors.New("no Kubernetes configuration found")
	// ErrElectionExists: this process already runs an election on the lease.
	ErrElectionExists = errors.New("an election on this lease is already running in this process")
	// ErrWatchExists: this process already watches the lease.
	ErrWatchExists = errors.New("a watch on this lease is already running in this process")
	// ErrNoElection: no election on the lease in this process.
	ErrNoElection = errors.New("no election on this lease in this process")
	// ErrWaitTimeout: WaitElected's timeout passed first.
	ErrWaitTimeout = errors.New("timed out waiting to be elected")
	// ErrCancelled: the election was cancelled (CancelElection or Shutdown).
	ErrCancelled = errors.New("election cancelled")
	// ErrRenewDeadline: no renewal succeeded within the renew deadline.
	ErrRenewDeadline = errors.New("renew deadline exceeded")
	// ErrLeaseDeleted: the Lease was deleted while we held it.
	ErrLeaseDeleted = errors.New("lease deleted by another writer")
	// ErrLeaseTaken: the Lease's holder was changed by another writer.
	ErrLeaseTaken = errors.New("lease taken by another holder")
	// ErrLeaseEdited: another writer changed our held Lease's record.
	ErrLeaseEdited = errors.New("lease record edited by another writer")
	// errTokenExhausted: leaseTransitions (an int32) cannot rise further.
	errTokenExhausted = errors.New("fencing token exhausted: leaseTransitions reached 2^31-1; delete the Lease to start over")
	// ErrShutdownTimeout: Shutdown did not finish within its timeout.
	ErrShutdownTimeout = errors.New("shutdown timed out")
	// ErrInternal wraps a panic caught inside the library: a bug, reported
	// instead of crashing the host.
	ErrInternal = errors.New("internal error")
)

// panicError turns a recovered panic into ErrInternal with its stack, for
// the goroutines the library runs on its own (calls from C are guarded by
// the cgo layer).
func panicError(p any) error {
	return fmt.Errorf("%w: panic: %v\n%s", ErrInternal, p, debug.Stack())
}

// logPanic, deferred first thing on a goroutine the library starts on its
// own, logs a panic there (ErrInternal, with its stack; what: what the
// goroutine did) instead of letting it kill the host.
func logPanic(what string) {
	if p := recover(); p != nil {
		logf(LevelError, "%s: %v", what, panicError(p))
	}
}
