// Package main stands in for another Go c-shared library a host needs
// besides k8s-lease (our first user's etcd client wrapper): one export of
// its own, a tiny in-memory key/value store, and k8s-lease's whole C ABI by
// one import. Built from the module root with
//
//	go build -buildmode=c-shared -o libembedding_go.so ./tests/cpp/embedding_go
//
// for tests/cpp/embedding_test.cpp, which links only this library.
package main

import "C"

import (
	"sync"

	_ "github.com/k8s-lease/k8s-lease/capi" // every K8sLease* function, exported from this library
)

var (
	mu    sync.Mutex
	store = map[string]string{}
)

// EmbedKVPut stores value under key; 0, or -1 when either is NULL.
//
//export EmbedKVPut
func EmbedKVPut(key, value *C.char) C.int {
	if key == nil || value == nil {
		return -1
	}
	mu.Lock()
	defer mu.Unlock()
	store[C.GoString(key)] = C.GoString(value)
	return 0
}

// EmbedKVGet returns a malloc'd copy of the value under key (the caller
// frees it with free), or NULL when there is none.
//
//export EmbedKVGet
func EmbedKVGet(key *C.char) *C.char {
	if key == nil {
		return nil
	}
	mu.Lock()
	v, ok := store[C.GoString(key)]
	mu.Unlock()
	if !ok {
		return nil
	}
	return C.CString(v)
}

func main() {}
