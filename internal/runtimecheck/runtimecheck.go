// Package runtimecheck tells whether another Go runtime is loaded in the
// process: Go does not support two Go c-shared libraries in one process
// (they crash at random), so the C library refuses to start beside one.
//
// Its C code lives in a .c file of its own, not in the cgo preamble of the
// library's main file: cgo copies that preamble into the generated header,
// which must stay plain C11 (no _GNU_SOURCE types such as Dl_info).
package runtimecheck

/*
#cgo CFLAGS: -D_GNU_SOURCE
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "runtimecheck.h"
*/
import "C"

import (
	"errors"
	"unsafe"
)

// OtherGoRuntime returns the path of a loaded object, other than the one
// holding this package, that carries its own Go runtime; "" when there is
// none.
func OtherGoRuntime() (string, error) {
	var failed C.int
	p := C.k8s_lease_other_go_runtime(&failed)
	if p != nil {
		defer C.free(unsafe.Pointer(p))
		return C.GoString(p), nil
	}
	if failed != 0 {
		return "", errors.New("could not examine the loaded objects (out of memory, or this library's own object not identified)")
	}
	return "", nil
}
