/*
 * k8s_lease_compat.h - the rest of libk8s_lease_wrapper.so's exports:
 * earlier forms of the functions of k8s_lease.h, kept with their ABI so
 * that code written with them builds and runs unchanged: k8s_lease.h
 * includes this file at its end, so such code needs no change of its
 * includes. New code may define K8S_LEASE_NO_COMPAT before including
 * k8s_lease.h to leave these out (this file, included itself, declares
 * them whatever that macro says). Each line says what a function equals there; the
 * contract (arguments, return codes, ownership, threads) is that
 * function's. "By name" forms act on whatever election or holder watch runs
 * on the lease now, not on one handle. Timeouts in seconds are int > 0.
 */
#ifndef K8S_LEASE_COMPAT_H
#define K8S_LEASE_COMPAT_H

#include "k8s_lease.h"

#ifdef __cplusplus
extern "C" {
#endif

/* = K8sLeaseRunElectionWith(..., leaseDurationSec * 1000, renewDeadlineSec * 1000, retryPeriodSec * 1000, NULL, 0, 0, NULL, errMsg) */
int K8sLeaseRunElection(const char* ns, const char* leaseName, const char* identity, int leaseDurationSec, int renewDeadlineSec,
                        int retryPeriodSec, char** errMsg);

/* = K8sLeaseRunElectionWith(..., NULL, 0, 0, NULL, errMsg) */
int K8sLeaseRunElectionMs(const char* ns, const char* leaseName, const char* identity, long long leaseDurationMs,
                          long long renewDeadlineMs, long long retryPeriodMs, char** errMsg);

/* = K8sLeaseRunElectionWith(..., NULL, 0, 0, electionId, errMsg) */
int K8sLeaseRunElectionMsId(const char* ns, const char* leaseName, const char* identity, long long leaseDurationMs,
                            long long renewDeadlineMs, long long retryPeriodMs, k8s_lease_election* electionId, char** errMsg);

/* = K8sLeaseWaitElectedMsId by name, timeout in seconds */
int K8sLeaseWaitElected(const char* ns, const char* leaseName, int timeoutSec, long long* fencingToken, char** errMsg);

/* = K8sLeaseWaitElectedMsId, timeout in seconds */
int K8sLeaseWaitElectedId(const char* ns, const char* leaseName, k8s_lease_election electionId, int timeoutSec,
                          long long* fencingToken, char** errMsg);

/* = K8sLeaseWaitLostId by name (no election: 0) */
int K8sLeaseWaitLost(const char* ns, const char* leaseName, char** errMsg);

/* = K8sLeaseIsLeaderId by name */
int K8sLeaseIsLeader(const char* ns, const char* leaseName, long long* fencingToken, long long* validForMs, char** errMsg);

/* = K8sLeaseCancelElectionId by name */
int K8sLeaseCancelElection(const char* ns, const char* leaseName, char** errMsg);

/* = K8sLeaseHandOffId by name */
int K8sLeaseHandOff(const char* ns, const char* leaseName, const char* toIdentity, long long timeoutMs, char** errMsg);

/* = K8sLeaseWatchHolderId with watchId NULL */
int K8sLeaseWatchHolder(const char* ns, const char* leaseName, void* callbackCtx, k8s_lease_holder_change_cb_t callbackFunc,
                        char** errMsg);

/* = K8sLeaseCancelWatchId by name (waits for every holder watch being stopped on the lease) */
int K8sLeaseCancelWatch(const char* ns, const char* leaseName, char** errMsg);

/* = K8sLeasePatchPodLabel with labelValue not NULL (NULL is an error here) */
int K8sPatchPodLabel(const char* ns, const char* podName, const char* labelKey, const char* labelValue, char** errMsg);

/* = K8sLeasePatchPodLabel(ns, podName, labelKey, NULL, errMsg) */
int K8sRemovePodLabel(const char* ns, const char* podName, const char* labelKey, char** errMsg);

/* Not an earlier form: returns 1, and is defined by libk8s_lease_wrapper.so
 * only, not by a Go library that embeds k8s-lease, so
 * dlsym(RTLD_DEFAULT, "K8sLeaseStandalone") tells a host which build it runs
 * (docs/embedding.md). */
int K8sLeaseStandalone(void);

/* k8s_lease_holder_change_cb_t's earlier name. */
typedef k8s_lease_holder_change_cb_t holder_change_cb_t;

#ifdef __cplusplus
}
#endif

#endif /* K8S_LEASE_COMPAT_H */
