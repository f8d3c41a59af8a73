// Package loaderstress is test support for runtimecheck (imported by its
// tests only, never by the library): it loads and unloads a shared object
// in a loop, and keeps the pre-fix scan that called dlopen inside
// dl_iterate_phdr's callback.
package loaderstress

/*
#cgo CFLAGS: -D_GNU_SOURCE
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "loaderstress.h"
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// DlopenCycles loads and unloads the shared object at path cycles times.
func DlopenCycles(path string, cycles int) error {
	p := C.CString(path)
	defer C.free(unsafe.Pointer(p))
	if C.k8s_lease_dlopen_cycles(p, C.int(cycles)) != 0 {
		return fmt.Errorf("dlopen %s failed", path)
	}
	return nil
}

// ScanOpeningInsideCallback is the pre-fix scan: dlopen inside the
// callback of dl_iterate_phdr.
func ScanOpeningInsideCallback() { C.k8s_lease_scan_opening_inside_callback() }
