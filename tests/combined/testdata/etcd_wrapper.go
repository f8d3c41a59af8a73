// Package main stands in for our first user's etcd_wrapper.go (Mooncake's
// etcd client wrapper) in the combined build of tests/combined/run.sh: a
// main package file with its own cgo preamble, its own exports and main,
// built with embedded/k8s_lease_wrapper.go into one c-shared library:
//
//	go build -buildmode=c-shared -o libcombined.so etcd_wrapper.go k8s_lease_wrapper.go
//
// A tiny in-memory key/value store replaces the etcd client: no etcd
// dependency. (In testdata: not a package of this module.)
package main

/*
#include <stdlib.h>

// The wrapper's own C types, as a real wrapper's preamble has them.
typedef struct {
	int found;
	char* value;
} StandInGetResult;
*/
import "C"

import "sync"

var (
	mu    sync.Mutex
	store = map[string]string{}
)

// StandInPut stores value under key: 0, or -1 when either is NULL.
//
//export StandInPut
func StandInPut(key, value *C.char) C.int {
	if key == nil || value == nil {
		return -1
	}
	mu.Lock()
	defer mu.Unlock()
	store[C.GoString(key)] = C.GoString(value)
	return 0
}

// StandInGet returns whether key is stored and a malloc'd copy of its value
// (the caller frees it with free), or NULL.
//
//export StandInGet
func StandInGet(key *C.char) C.StandInGetResult {
	var r C.StandInGetResult
	if key == nil {
		return r
	}
	mu.Lock()
	v, ok := store[C.GoString(key)]
	mu.Unlock()
	if ok {
		r.found = 1
		r.value = C.CString(v)
	}
	return r
}

func main() {}
