// Package main is the standalone C library of k8s-lease, built with
//
//	go build -buildmode=c-shared -o libk8s_lease_wrapper.so k8s_lease_wrapper.go
//
// This file alone must build the library (the C++ master's build names only
// it). The C ABI itself, every function of include/k8s_lease.h and
// include/k8s_lease_compat.h, is defined and exported by package capi,
// imported here for its side effects; another Go c-shared library gets the
// same ABI by the same import (see package capi and docs/embedding.md).
//
// cgo writes the header beside the library (libk8s_lease_wrapper.h, which
// hosts include) from this package alone: its preamble below and its own
// exports. So the preamble declares every function of package capi, with
// the char* that cgo gives a *C.char where include/k8s_lease.h has const
// char* (the same ABI), and this package keeps one export of its own,
// K8sLeaseStandalone (without one, cgo writes no header). The preamble
// stays plain C11 and C++-safe; `make header-check` compiles it, checks each
// declaration's type against package capi's definitions, and checks that
// every function the library exports is declared.
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
*/
import "C"

import _ "github.com/k8s-lease/k8s-lease/capi" // the C ABI: every export but K8sLeaseStandalone

// main is required by -buildmode=c-shared and never runs.
func main() {}

// K8sLeaseStandalone returns 1. It is defined here, in the standalone
// library only: a Go c-shared library that embeds package capi exports
// every other function but not this one, so a host that looks it up with
// dlsym learns which build it runs (see include/k8s_lease.h).
//
//export K8sLeaseStandalone
func K8sLeaseStandalone() C.int {
	return 1
}
