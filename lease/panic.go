package lease

import (
	"fmt"
	"runtime/debug"
)

// panicError turns a recovered panic into ErrInternal with its stack, for
// the goroutines the library runs on its own (calls from C are guarded by
// the cgo layer).
func panicError(p any) error {
	return fmt.Errorf("%w: panic: %v\n%s", ErrInternal, p, debug.Stack())
}
