// Package capi is the C ABI of k8s-lease: it defines and exports, with
// cgo's //export, every function of include/k8s_lease.h and
// include/k8s_lease_compat.h (the K8sLease* functions, K8sPatchPodLabel and
// K8sRemovePodLabel) but K8sLeaseStandalone.
// It has no Go API.
//
// The standalone library libk8s_lease_wrapper.so is the main package in
// k8s_lease_wrapper.go at the module root, which imports this package for
// its side effects; its own preamble only declares the functions, so that
// the header cgo generates beside the library declares them too.
//
// # Embedding in another Go c-shared library
//
// A process can hold only one Go runtime, so a C or C++ program that needs
// another Go c-shared library (our first user's etcd client wrapper, say)
// and k8s-lease builds both into that one library: its main package adds
//
//	import _ "github.com/k8s-lease/k8s-lease/capi"
//
// and is built as before, with go build -buildmode=c-shared. Its .so then
// exports every function below as well as its own, and its C and C++
// callers include include/k8s_lease.h (the header cgo generates for that
// library declares only the library's own exports). What holds:
//
//   - Every function has the name, signature (the ABI of
//     include/k8s_lease.h) and behaviour it has in libk8s_lease_wrapper.so:
//     both are this package's code, once.
//   - K8sLeaseInit accepts: the second-runtime check skips the object that
//     holds this code, whichever library that is, and refuses only a Go
//     runtime in another loaded object.
//   - K8sLeaseStandalone is the one function missing: it is defined by
//     libk8s_lease_wrapper.so only, so a host that looks it up with dlsym
//     learns which build it runs.
//   - Logging is process-wide: klog is one per runtime, so
//     K8sLeaseSetLogger and K8sLeaseSetLogLevel also route and set the
//     verbosity of the host library's own client-go (and any klog) logs,
//     and a host library that configures klog itself changes ours.
//   - Metrics too: K8sLeaseMetrics names client-go's
//     leader_election_master_status; a host library exporting client-go's
//     own leader-election metrics must not append both.
//
// Not supported: loading such a library beside libk8s_lease_wrapper.so or
// beside any other Go c-shared library (two runtimes: K8sLeaseInit refuses
// and names the other object); a -buildmode=c-archive or -buildmode=plugin
// build (untested); a library that exports a function of its own under
// one of these names (the link fails).
package capi
