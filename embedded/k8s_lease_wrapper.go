//go:build k8s_lease_embedded

// This file is k8s-lease's wrapper for a Go c-shared library that is built
// from files named on the command line, beside another main package file
// that defines main (our first user's etcd wrapper):
//
//	go mod tidy
//	go build -buildmode=c-shared -o libmooncake_ha_wrapper.so etcd_wrapper.go k8s_lease_wrapper.go
//
// Copy it into that module's directory (which requires
// github.com/k8s-lease/k8s-lease). It is the root k8s_lease_wrapper.go
// without main and without K8sLeaseStandalone: the library exports every
// function of include/k8s_lease.h and include/k8s_lease_compat.h but
// K8sLeaseStandalone (from package capi, imported below), and the header
// cgo generates for it declares them (the preamble below; cgo does not
// declare a non-main package's exports, golang/go#27150). A library built from a directory (go build .)
// needs no copy: its main package imports package capi (see docs/embedding.md).
//
// The build constraint keeps this file out of this module's own builds
// (go build ./..., go vet ./...): a file named on the go build command line
// compiles whatever its tags. go mod tidy reads it all the same (only the
// tag "ignore" hides a file from tidy), which is what the user's module
// needs: its imports are required there; here they change nothing.
//
// The preamble is the root file's, verbatim (tests/combined checks it),
// followed by the declaration of k8s_lease_embedded_anchor: cgo copies a
// file's preamble into the generated header only when the file has an
// export of its own, and every function of the ABI but K8sLeaseStandalone
// is package capi's, so this file exports one function that is not part of
// the ABI and declares it hidden: it is not in the library's dynamic symbol
// table (nothing can link to it or find it with dlsym), and the generated
// header names it only there.
package main

/*
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

typedef void (*k8s_lease_holder_change_cb_t)(void* ctx, const char* holder, size_t holderSize, int64_t fencingToken);
typedef k8s_lease_holder_change_cb_t holder_change_cb_t; // its earlier name, kept for code written with it

typedef void (*k8s_lease_log_cb_t)(void* ctx, int level, const char* msg, size_t msgSize);

// The policy flags of K8sLeaseRunElectionWith, as include/k8s_lease.h defines them.
#define K8S_LEASE_POLICY_HANDOFF_ON_CANCEL 1
#define K8S_LEASE_POLICY_YIELD_TO_NEWER 2

#ifdef __cplusplus
extern "C" {
#endif

// Defined in package capi; documented in include/k8s_lease.h and include/k8s_lease_compat.h.
extern int K8sLeaseInit(char** errMsg);
extern int K8sLeaseRunElection(char* ns, char* leaseName, char* identity, int leaseDurationSec, int renewDeadlineSec, int retryPeriodSec, char** errMsg);
extern int K8sLeaseRunElectionMs(char* ns, char* leaseName, char* identity, long long leaseDurationMs, long long renewDeadlineMs, long long retryPeriodMs, char** errMsg);
extern int K8sLeaseRunElectionMsId(char* ns, char* leaseName, char* identity, long long leaseDurationMs, long long renewDeadlineMs, long long retryPeriodMs, long long* electionId, char** errMsg);
extern int K8sLeaseWaitElected(char* ns, char* leaseName, int timeoutSec, long long* fencingToken, char** errMsg);
extern int K8sLeaseWaitElectedId(char* ns, char* leaseName, long long electionId, int timeoutSec, long long* fencingToken, char** errMsg);
extern int K8sLeaseWaitElectedMsId(char* ns, char* leaseName, long long electionId, long long timeoutMs, long long* fencingToken, char** errMsg);
extern int K8sLeaseWaitLost(char* ns, char* leaseName, char** errMsg);
extern int K8sLeaseWaitLostId(char* ns, char* leaseName, long long electionId, char** errMsg);
extern int K8sLeaseCancelElection(char* ns, char* leaseName, char** errMsg);
extern int K8sLeaseHandOff(char* ns, char* leaseName, char* toIdentity, long long timeoutMs, char** errMsg);
extern int K8sLeaseHandOffId(char* ns, char* leaseName, long long electionId, char* toIdentity, long long timeoutMs, char** errMsg);
extern int K8sLeaseRunElectionWith(char* ns, char* leaseName, char* identity, long long leaseDurationMs, long long renewDeadlineMs, long long retryPeriodMs, char* version, int priority, int policy, long long* electionId, char** errMsg);
extern int K8sLeaseCandidates(char* ns, char* leaseName, char** candidatesJson, char** errMsg);
extern int K8sLeaseCancelElectionId(char* ns, char* leaseName, long long electionId, char** errMsg);
extern int K8sLeasePublishEndpoint(char* ns, char* leaseName, long long electionId, char* service, char* address, int port, char** errMsg);
extern int K8sLeaseIsLeader(char* ns, char* leaseName, long long* fencingToken, long long* validForMs, char** errMsg);
extern int K8sLeaseIsLeaderId(char* ns, char* leaseName, long long electionId, long long* fencingToken, long long* validForMs, char** errMsg);
extern int K8sLeaseGetHolder(char* ns, char* leaseName, char** holderIdentity, long long* fencingToken, char** errMsg);
extern int K8sLeaseWatchHolder(char* ns, char* leaseName, void* callbackCtx, k8s_lease_holder_change_cb_t callbackFunc, char** errMsg);
extern int K8sLeaseWatchHolderId(char* ns, char* leaseName, void* callbackCtx, k8s_lease_holder_change_cb_t callbackFunc, long long* watchId, char** errMsg);
extern int K8sLeaseCancelWatch(char* ns, char* leaseName, char** errMsg);
extern int K8sLeaseCancelWatchId(char* ns, char* leaseName, long long watchId, char** errMsg);
extern int K8sLeasePatchPodLabel(char* ns, char* podName, char* labelKey, char* labelValue, char** errMsg);
extern int K8sPatchPodLabel(char* ns, char* podName, char* labelKey, char* labelValue, char** errMsg);
extern int K8sRemovePodLabel(char* ns, char* podName, char* labelKey, char** errMsg);
extern int K8sLeaseShutdown(int timeoutMs, char** errMsg);
extern int K8sLeaseSetLogger(void* callbackCtx, k8s_lease_log_cb_t callbackFunc, char** errMsg);
extern int K8sLeaseSetLogLevel(int level, char** errMsg);
extern int K8sLeaseStats(char** statsJSON, char** errMsg);
extern int K8sLeaseMetrics(char** text, char** errMsg);
extern void K8sLeaseFree(void* p);
extern char* K8sLeaseVersion(void); // a static string: do not free it

#ifdef __cplusplus
}
#endif

#ifdef __cplusplus
extern "C" {
#endif

// Not part of the ABI: this file's own export (see the Go comment), hidden.
extern int k8s_lease_embedded_anchor(void) __attribute__((visibility("hidden")));

#ifdef __cplusplus
}
#endif
*/
import "C"

import _ "github.com/k8s-lease/k8s-lease/capi" // the C ABI: every export but K8sLeaseStandalone

// k8s_lease_embedded_anchor returns 0 and is never called: its export makes
// cgo copy the preamble above into the generated header, and the preamble
// declares it hidden, so the library does not export it.
//
//export k8s_lease_embedded_anchor
func k8s_lease_embedded_anchor() C.int {
	return 0
}
