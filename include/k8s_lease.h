/*
 * k8s_lease.h - Kubernetes Lease leader election for C and C++ programs.
 *
 * The contract of libk8s_lease_wrapper.so, and of any Go c-shared library
 * that embeds k8s-lease (docs/embedding.md). One function per operation,
 * in the order a program calls them:
 *   1. Init      K8sLeaseInit, K8sLeaseVersion
 *   2. Elect     K8sLeaseRunElectionWith, then on its k8s_lease_election:
 *                K8sLeaseWaitElectedMsId, K8sLeaseWaitLostId,
 *                K8sLeaseIsLeaderId, K8sLeasePublishEndpoint,
 *                K8sLeaseCancelElectionId; and K8sLeasePatchPodLabel
 *                (on a Pod, with no election handle)
 *   3. Observe   K8sLeaseGetHolder, K8sLeaseWatchHolderId,
 *                K8sLeaseCancelWatchId
 *   4. Hand off  K8sLeaseCandidates, K8sLeaseHandOffId
 *   5. Shutdown  K8sLeaseShutdown
 *   6. Operate   K8sLeaseSetLogger, K8sLeaseSetLogLevel, K8sLeaseStats,
 *                K8sLeaseMetrics
 *   7. Free      K8sLeaseFree
 * The earlier forms (timeouts in seconds, calls by lease name) and
 * K8sLeaseStandalone are in k8s_lease_compat.h, included at the end so that
 * earlier code builds unchanged (define K8S_LEASE_NO_COMPAT to leave them
 * out). What a deployment needs around the calls (RBAC, kubectl, candidate
 * records, the preferred holder, policies, feature gates): docs/operations.md.
 *
 * The header cgo generates beside the library (libk8s_lease_wrapper.h)
 * declares every export with `char*` where this one has `const char*`: the
 * same ABI. Include one of the two in a file, never both (C and C++ reject
 * prototypes that differ in const).
 *
 * Conventions, for every function unless its comment says otherwise:
 *   - Return 0 on success, -1 on error. On error *errMsg is set to a
 *     message naming what is wrong, owned by the caller (free it with
 *     K8sLeaseFree); on success it is set to NULL. errMsg may be NULL: then
 *     no message is made.
 *   - Every pointer may be NULL without crashing: a NULL string argument is
 *     an error ("invalid argument: <argument>: must not be NULL"), a NULL
 *     out-pointer is not written, except the whole result of
 *     K8sLeaseCandidates, K8sLeaseStats and K8sLeaseMetrics (an error).
 *     Out-parameters are zeroed (0, NULL) first, so they read so on error.
 *   - A lease is (ns, leaseName): ns a DNS-1123 label, leaseName a DNS-1123
 *     subdomain, checked before any network call. An election is named by
 *     its lease and its k8s_lease_election, and a call never acts on a later
 *     election on the same lease (one that replaced it); an ended election
 *     keeps its outcome until 64 more have replaced it, and a cancelled one
 *     reads as no such election.
 *   - Durations are milliseconds (long long, or int in K8sLeaseShutdown).
 *   - All functions are thread-safe. None may be called after fork()
 *     without exec. The library cannot be unloaded, and a process must not
 *     load a second Go c-shared library (K8sLeaseInit refuses).
 *   - Callbacks run on threads the library owns, must not throw (a C++
 *     exception must never unwind into the Go runtime), and may call any
 *     function of this library; each callback type says what to avoid.
 *   - A panic inside the library never reaches the host: the call returns
 *     -1 "internal error: ...", or on a library thread that election or
 *     holder watch ends (WaitElected/WaitLost return -1 "internal error").
 *   - The fencing token is the Lease's spec.leaseTransitions of the term:
 *     >= 1, and greater than the token of every earlier term of the lease
 *     (re-acquisition by the same identity included). Pass it to storage
 *     that rejects writes carrying a smaller one. Deleting a Lease in use
 *     ends its holder's term; the library re-creates it with a token above
 *     the highest this process saw (1 if it saw none) and logs a warning.
 *
 * Guarantee: K8sLeaseIsLeaderId returns 1 only before (send time of the
 * last successful renewal) + renewDeadline on the process's monotonic
 * clock, and another candidate takes over only a full leaseDuration after
 * it saw that renewal; leaseDuration > renewDeadline. This holds while
 * process pauses stay below leaseDuration - renewDeadline and clock rates
 * differ by less than leaseDuration/renewDeadline: docs/guarantees.md.
 */
#ifndef K8S_LEASE_H
#define K8S_LEASE_H

#include <stddef.h>
#include <stdint.h>

/* The version of this header, VERSION's; compare with K8sLeaseVersion() to
 * learn that the library loaded is another. */
#define K8S_LEASE_VERSION_MAJOR 0
#define K8S_LEASE_VERSION_MINOR 1
#define K8S_LEASE_VERSION_PATCH 0
#define K8S_LEASE_VERSION "0.1.0"

#ifdef __cplusplus
extern "C" {
#endif

/* An election (one candidacy and at most one term of leadership): > 0,
 * unique in the process, from K8sLeaseRunElectionWith. */
typedef long long k8s_lease_election;

/* A holder watch: > 0, unique in the process, from K8sLeaseWatchHolderId. */
typedef long long k8s_lease_holder_watch;

/* ======================================================================
 * 1. Init
 * ====================================================================== */

/*
 * K8sLeaseInit - load the cluster configuration: the in-cluster service
 * account, else $KUBECONFIG, else ~/.kube/config; the error names every
 * source tried. Reads the environment at the call (KUBECONFIG, HOME,
 * KUBERNETES_SERVICE_HOST/PORT, K8S_LEASE_EVENTS: docs/operations.md), so a
 * setenv() before it counts. Makes no API call. Idempotent.
 * Optional: every function that needs the cluster does the same on first
 * use, and tries again at its next call after a failure; call it to see a
 * configuration error early.
 * Returns 0, or -1 (no configuration; an unknown K8S_LEASE_EVENTS; another
 * Go c-shared library is loaded: "another Go runtime is loaded in this
 * process (<path>)").
 */
int K8sLeaseInit(char** errMsg);

/*
 * K8sLeaseVersion - the library's version, "MAJOR.MINOR.PATCH". A static
 * string: never free or modify it.
 */
const char* K8sLeaseVersion(void);

/* ======================================================================
 * 2. Elect
 * ====================================================================== */

/* Policies of K8sLeaseRunElectionWith (flags, or-ed; docs/operations.md).
 * HANDOFF_ON_CANCEL: cancelling a leading election (K8sLeaseCancelElectionId,
 * K8sLeaseShutdown) hands the lease to the best candidate seen alive in
 * this term instead of releasing it; with none, or if it does not take the
 * lease within min(renewDeadline, 1 s), the lease is released.
 * YIELD_TO_NEWER: while leading, hand the lease to the best candidate of a
 * newer version as soon as one campaigns. */
#define K8S_LEASE_POLICY_HANDOFF_ON_CANCEL 1
#define K8S_LEASE_POLICY_YIELD_TO_NEWER 2

/*
 * K8sLeaseRunElectionWith - start a candidacy on ns/leaseName as identity.
 * Returns at once: campaigning, renewing and releasing run on library
 * threads.
 *   identity         non-empty, no control characters, at most 1024 bytes,
 *                    not starting "k8s-lease.io/hand-off:".
 *   leaseDurationMs, renewDeadlineMs, retryPeriodMs   client-go's timings:
 *                    leaseDuration > renewDeadline > 1.2 * retryPeriod > 0,
 *                    the lease duration a whole number of seconds.
 *   version          semantic ("1.4.2", "v1.4.2"), or NULL/"" for none
 *                    (older than any); it and priority (higher preferred)
 *                    order the candidates for hand-offs.
 *   policy           0 or K8S_LEASE_POLICY_* flags.
 *   electionId       (may be NULL) set to the election's handle, for the
 *                    functions below; 0 on error.
 * One election per lease per process: a second is refused until the first
 * is cancelled or has ended. The candidacy is recorded so that
 * K8sLeaseCandidates sees it (written off the caller's thread; RBAC and
 * details: docs/operations.md).
 * Returns 0, or -1 (no configuration; bad argument: timings, identity,
 * version, unknown policy flags; an election exists on the lease).
 */
int K8sLeaseRunElectionWith(const char* ns, const char* leaseName, const char* identity, long long leaseDurationMs,
                            long long renewDeadlineMs, long long retryPeriodMs, const char* version, int priority, int policy,
                            k8s_lease_election* electionId, char** errMsg);

/*
 * K8sLeaseWaitElectedMsId - block until the election leads, for at most
 * timeoutMs (> 0). On success *fencingToken is the term's fencing token,
 * and the term has at least a retry period of validity left (an
 * acquisition the API server answered later than that is renewed before
 * it is announced).
 * When the timeout passes the candidacy is CANCELLED (so do not poll with
 * short timeouts: wait on a thread, and end a wait early with
 * K8sLeaseCancelElectionId from another). Errors an operator cures while
 * the process runs (forbidden, unauthorized, a missing namespace) do not end
 * the candidacy: they are logged and retried (backoff up to 8 s).
 * ("Ms": K8sLeaseWaitElectedId, in k8s_lease_compat.h, takes seconds.)
 * Returns 0 (leader), or -1: no such election, the timeout passed (the
 * message ends "last API error: ..." when a request failed), the election
 * was cancelled or already lost, or the candidacy gave up on an error no
 * retry cures (a request the API server rejects as invalid; the fencing
 * token exhausted at 2^31-1: delete the Lease).
 */
int K8sLeaseWaitElectedMsId(const char* ns, const char* leaseName, k8s_lease_election electionId, long long timeoutMs,
                            long long* fencingToken, char** errMsg);

/*
 * K8sLeaseWaitLostId - block until the election's leadership (or, if it
 * never led, its candidacy) ends. After a loss the process must stop acting
 * as leader; start a new election to stand again.
 * Returns 0 when it was cancelled (K8sLeaseCancelElectionId,
 * K8sLeaseShutdown, a hand-off by K8sLeaseHandOffId) or there is no such
 * election; -1 with the reason otherwise: "renew deadline exceeded" (with
 * the last API error), "lease deleted by another writer", "lease taken by
 * another holder", "lease record edited by another writer", "leadership
 * handed off to <identity> (...)" (the preferred holder or a policy), or an
 * error of the candidacy (see K8sLeaseWaitElectedMsId).
 */
int K8sLeaseWaitLostId(const char* ns, const char* leaseName, k8s_lease_election electionId, char** errMsg);

/*
 * K8sLeaseIsLeaderId - whether the election leads right now (the guarantee
 * at the top of this file). No API call: cheap enough to gate every unit of
 * leader-only work. *fencingToken is the token and *validForMs how long
 * leadership lasts without a further renewal (both 0 when not leader).
 * Returns 1 (leader), 0 (not leader, or no such election), -1 (bad
 * argument).
 */
int K8sLeaseIsLeaderId(const char* ns, const char* leaseName, k8s_lease_election electionId, long long* fencingToken,
                       long long* validForMs, char** errMsg);

/*
 * K8sLeasePublishEndpoint - while the election leads, route the
 * selector-less Service `service` in ns to address:port: an EndpointSlice
 * "<service>-leader" that the library writes with the term's fencing token
 * (a slice of a later term is never replaced), withdrawn on a graceful end.
 * Call it before K8sLeaseWaitElectedMsId, which then returns after the
 * write's first attempt (called on a leader, this call writes and returns
 * after that attempt, at most min(renewDeadline, 10 s)). A failed write is
 * retried (1 s to 30 s), logged, counted and reported as an Event; it never
 * changes the election. The Service needs one unnamed port.
 *   address  an IPv4 or IPv6 address a slice accepts (not unspecified,
 *            loopback, link-local, multicast or IPv4-mapped; no zone).
 *   port     1..65535; service a DNS-1035 label.
 * One endpoint per election; the same arguments again are a no-op.
 * Behaviour under faults and RBAC: docs/operations.md (Leader-only routing).
 * Returns 0, or -1 (bad argument, no such election or it ended, the
 * election publishes another endpoint).
 */
int K8sLeasePublishEndpoint(const char* ns, const char* leaseName, k8s_lease_election electionId, const char* service,
                            const char* address, int port, char** errMsg);

/*
 * K8sLeasePatchPodLabel - set label labelKey=labelValue on Pod ns/podName
 * (a JSON merge patch), e.g. so that a Service selects the leader; with
 * labelValue NULL (the patch's null) remove it, an absent label being
 * success. The key must be a qualified name, the value a label value.
 * Takes no election handle: it acts on the Pod whatever leads. Blocks for
 * one request, at most 10 s.
 * Returns 0, or -1 (bad argument, pod not found, forbidden, API error).
 */
int K8sLeasePatchPodLabel(const char* ns, const char* podName, const char* labelKey, const char* labelValue, char** errMsg);

/*
 * K8sLeaseCancelElectionId - end the election. Synchronous: when it
 * returns, leadership has ended (IsLeader 0, WaitLost woken with 0) and, if
 * it led, the Lease is released (a standby takes over at once) or the
 * release failed within min(renewDeadline, 10 s); a published endpoint is
 * withdrawn first, and the "stopped leading" Event and the candidate
 * record's delete are done (at most 2 s more), so the host may exit right
 * after. With K8S_LEASE_POLICY_HANDOFF_ON_CANCEL it hands off instead.
 * While another call ends the same election (a hand-off, K8sLeaseShutdown),
 * it returns once that has ended it: from a holder callback that can block
 * the callback for the hand-off's timeout. No such election, or one that
 * already ended, is success.
 * Returns 0, or -1 (bad argument, electionId <= 0, the release failed: the
 * lease then expires).
 */
int K8sLeaseCancelElectionId(const char* ns, const char* leaseName, k8s_lease_election electionId, char** errMsg);

/* ======================================================================
 * 3. Observe
 *
 * The process keeps a current view of a lease (one list, then an API watch)
 * while an election, a holder watch or K8sLeaseGetHolder uses it; while an
 * election of its own leads, the view comes from the renewals.
 * ====================================================================== */

/*
 * K8sLeaseGetHolder - the holder of ns/leaseName: *holderIdentity a new
 * string (free with K8sLeaseFree), or NULL when there is none (released, or
 * not renewed for a lease duration as judged by this process's clock);
 * *fencingToken the fencing token. The first call on a lease waits for its
 * list (at most 10 s); later calls answer locally (~1 us, no API call).
 * During a hand-off not yet taken up, the holder is its target, with the
 * token of the term that handed off. Leases asked about and used by nothing
 * else stay observed for 1 to 1.5 minutes after the last call, at most 64.
 * Returns 0 (the Lease exists), 1 (it does not), -1 (no configuration, bad
 * argument, the first list failed, e.g. forbidden).
 */
int K8sLeaseGetHolder(const char* ns, const char* leaseName, char** holderIdentity, long long* fencingToken, char** errMsg);

/*
 * k8s_lease_holder_change_cb_t - a holder watch's callback.
 *   ctx           the callbackCtx given to K8sLeaseWatchHolderId.
 *   holder        the holder, or NULL when there is none (Lease absent,
 *                 released, or not renewed for a lease duration); valid only
 *                 during the call.
 *   holderSize    strlen(holder); 0 when holder is NULL.
 *   fencingToken  the Lease's fencing token (0 when it is absent).
 * Runs on a library thread (not always the same); callbacks of one holder
 * watch never overlap. Should return quickly. May call any function; see
 * K8sLeaseCancelWatchId for cancelling from inside it.
 */
typedef void (*k8s_lease_holder_change_cb_t)(void* ctx, const char* holder, size_t holderSize, int64_t fencingToken);

/*
 * K8sLeaseWatchHolderId - start a holder watch on ns/leaseName: call
 * callbackFunc(callbackCtx, ...) once with the current holder (once the
 * view is synced), then once per change of (holder, token), never for a
 * mere renewal. A holder that stops renewing is reported as NULL within 1 s
 * of its expiry; the API watch reconnects after errors and resyncs, so the
 * final state is never missed. callbackCtx must stay valid until
 * K8sLeaseCancelWatchId returns. One holder watch per lease per process.
 * *watchId (may be NULL) is set to its handle.
 * Returns 0, or -1 (no configuration, bad argument, a holder watch exists).
 */
int K8sLeaseWatchHolderId(const char* ns, const char* leaseName, void* callbackCtx, k8s_lease_holder_change_cb_t callbackFunc,
                          k8s_lease_holder_watch* watchId, char** errMsg);

/*
 * K8sLeaseCancelWatchId - stop the holder watch watchId. Synchronous: when
 * it returns, no callback of it runs or will run, so callbackCtx may be
 * freed. From inside its own callback it does not wait for itself, and no
 * callback follows the current one. (Two holder watches' callbacks must not
 * cancel each other's: each would wait for the other.) A holder watch that
 * no longer runs is success.
 * Returns 0, or -1 (bad argument, watchId <= 0).
 */
int K8sLeaseCancelWatchId(const char* ns, const char* leaseName, k8s_lease_holder_watch watchId, char** errMsg);

/* ======================================================================
 * 4. Hand off
 * ====================================================================== */

/*
 * K8sLeaseCandidates - the live candidates of ns/leaseName (records renewed
 * within 10 minutes: a crashed process stays listed until then), best first
 * (newest version, then highest priority), as a JSON array in
 * *candidatesJson (free with K8sLeaseFree):
 *   [{"identity", "version" (absent: none), "priority", "renew_time",
 *     "seen_token" (the highest fencing token it had seen),
 *     "seen_lease_uid" (the UID of the Lease that token was seen on;
 *     absent: none)}]
 * Blocks for one list request, at most 10 s (its RBAC: docs/operations.md).
 * candidatesJson must not be NULL.
 * Returns 0, or -1 (bad argument, API error).
 */
int K8sLeaseCandidates(const char* ns, const char* leaseName, char** candidatesJson, char** errMsg);

/*
 * K8sLeaseHandOffId - planned hand-off: the election, which must lead, stops
 * leading and gives the lease to the candidate toIdentity, which takes it
 * with the next fencing token (about two round trips if it campaigns). Call
 * it on the leader, e.g. on SIGTERM, instead of K8sLeaseCancelElectionId.
 * A target with no live candidate record is refused and leadership kept;
 * when the record cannot be read at all (RBAC: no get on the records), this
 * explicit hand-off goes ahead unchecked (the policies and the preferred
 * holder refuse instead). Otherwise it blocks until toIdentity leads (0) or
 * timeoutMs (> 0) passes: the lease is then released for anyone. No other
 * candidate takes the lease meanwhile (at most this leader's lease
 * duration). The election ends either way, as by a cancel (WaitLost
 * returns 0). timeoutMs bounds only the wait for the target; in all it
 * blocks at most 10 s (the target's record) + D/2 (an endpoint's
 * withdrawal) + D (the write; if it fails, D more for the release) +
 * timeoutMs + D (the release), D = min(renewDeadline, 10 s), and a
 * renewal's answer on its way. How it works: docs/operations.md.
 * Returns 0, or -1 with the reason: not the leader (no such election, a
 * standby, leadership lost), toIdentity invalid or this leader's own,
 * "target not seen campaigning", timeoutMs not > 0, the hand-off write
 * failed (the lease is then released; if that fails too, a write whose
 * answer was lost may have handed it over), "the lease changed before the
 * target took it", "hand-off timed out ... the lease is released".
 */
int K8sLeaseHandOffId(const char* ns, const char* leaseName, k8s_lease_election electionId, const char* toIdentity,
                      long long timeoutMs, char** errMsg);

/* ======================================================================
 * 5. Shutdown
 * ====================================================================== */

/*
 * K8sLeaseShutdown - cancel every election (releasing held leases, or
 * handing off under K8S_LEASE_POLICY_HANDOFF_ON_CANCEL) and every holder
 * watch of the process, in parallel, waiting up to timeoutMs (> 0) for
 * them, hand-offs in flight, the candidate records' deletes and the
 * Events (at most 2 s of it). From a holder callback it does not wait for
 * that callback. The library stays usable afterwards.
 * Returns 0, or -1 (bad argument, timeout, a release failed).
 */
int K8sLeaseShutdown(int timeoutMs, char** errMsg);

/* ======================================================================
 * 6. Operate: logs, stats, metrics
 * ====================================================================== */

/*
 * k8s_lease_log_cb_t - receives the library's log lines and client-go's.
 *   level  0 error, 1 warning, 2 info, 3+ debug.
 *   msg    without a trailing newline; valid only during the call.
 * Runs on one library thread, never the caller's, never under a library
 * lock, never on the renewal path; calls are in order. Lines wait in a
 * queue of 1024 and are dropped (and counted) when it is full. May call any
 * function; but K8sLeaseSetLogger waits for a log callback in progress, so
 * do not call it from a holder callback (or under a lock) that the log
 * callback may be waiting for.
 */
typedef void (*k8s_lease_log_cb_t)(void* ctx, int level, const char* msg, size_t msgSize);

/*
 * K8sLeaseSetLogger - send logs to callbackFunc(callbackCtx, ...); NULL
 * restores the default, standard error. When it returns, the callback it
 * replaced is not running and will not be called again (unless called from
 * that callback), so its ctx may be freed.
 * Returns 0.
 */
int K8sLeaseSetLogger(void* callbackCtx, k8s_lease_log_cb_t callbackFunc, char** errMsg);

/*
 * K8sLeaseSetLogLevel - log up to level: 0 errors, 1 warnings (the
 * default), 2 info (elections, losses, releases), 3 debug; 4..12 also raise
 * client-go's verbosity (klog -v 1..9; 9 logs every request, credentials
 * masked).
 * Returns 0, or -1 (level outside 0..12).
 */
int K8sLeaseSetLogLevel(int level, char** errMsg);

/*
 * K8sLeaseStats - counters of every lease the process used, cumulative, as
 * JSON in *statsJson (free with K8sLeaseFree):
 *   {"version", "log_lines_dropped", "leases": [{"namespace", "name",
 *     "election": null or {"running", "leader", "fencing_token", ...},
 *     "watching", ...}]}
 * Every field: docs/operations.md (Metrics).
 * Returns 0, or -1 (statsJson NULL: an error, unlike other out-pointers).
 */
int K8sLeaseStats(char** statsJson, char** errMsg);

/*
 * K8sLeaseMetrics - the same and more in the Prometheus text format 0.0.4
 * in *text (free with K8sLeaseFree), for a host to append to its /metrics
 * (served as "text/plain; version=0.0.4"). No label holds an identity.
 * The families: docs/operations.md (Metrics).
 * Returns 0, or -1 (text NULL: an error, unlike other out-pointers).
 */
int K8sLeaseMetrics(char** text, char** errMsg);

/* ======================================================================
 * 7. Free
 * ====================================================================== */

/*
 * K8sLeaseFree - free a string this library returned (*errMsg,
 * *holderIdentity, *candidatesJson, *statsJson, *text). NULL is ignored.
 * Never K8sLeaseVersion's result.
 */
void K8sLeaseFree(void* p);

#ifdef __cplusplus
}
#endif

/* The earlier forms (k8s_lease_compat.h), unless the program opts out. */
#ifndef K8S_LEASE_NO_COMPAT
#include "k8s_lease_compat.h"
#endif

#endif /* K8S_LEASE_H */
