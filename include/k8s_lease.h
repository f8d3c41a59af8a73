/*
 * k8s_lease.h - Kubernetes Lease leader election for C and C++ programs.
 *
 * The public contract of libk8s_lease_wrapper.so, and of any other Go
 * c-shared library that embeds k8s-lease (its main package imports
 * github.com/k8s-lease/k8s-lease/capi; see docs/embedding.md): such a
 * library exports every function below, with the same behaviour, but
 * K8sLeaseStandalone, and its callers include this header. The header cgo
 * generates beside libk8s_lease_wrapper.so (libk8s_lease_wrapper.h)
 * declares the same functions with `char*` where this one has `const char*`
 * (every string the library only reads, and K8sLeaseVersion's result, which
 * the caller only reads): the same ABI, so code written against either
 * links with the library, and C++ callers of this one pass literals and
 * c_str() without a cast. Include one of the two in a file, never both
 * (their prototypes differ in const, which C and C++ reject as a conflict).
 *
 * The functions, in the order a program uses them:
 *   1. Init      K8sLeaseInit, K8sLeaseVersion, K8sLeaseStandalone
 *   2. Elect     K8sLeaseRunElectionWith (the general one); K8sLeaseRunElection,
 *                K8sLeaseRunElectionMs, K8sLeaseRunElectionMsId (conveniences)
 *   3. Wait      K8sLeaseWaitElected[Id], K8sLeaseWaitLost[Id]
 *   4. Lead      K8sLeaseIsLeader[Id], K8sLeasePublishEndpoint,
 *                K8sPatchPodLabel, K8sRemovePodLabel
 *   5. Cancel    K8sLeaseCancelElection[Id], K8sLeaseShutdown
 *   6. Observe   K8sLeaseGetHolder; holder watches: K8sLeaseWatchHolder[Id],
 *                K8sLeaseCancelWatch[Id]
 *   7. Hand off  K8sLeaseHandOff, K8sLeaseCandidates
 *   8. Operate   K8sLeaseSetLogger, K8sLeaseSetLogLevel, K8sLeaseStats,
 *                K8sLeaseMetrics
 *   9. Free      K8sLeaseFree
 * What a deployment needs around them (the RBAC rules each function needs,
 * kubectl commands, Kubernetes feature gates) is in docs/operations.md.
 *
 * Conventions, for every function unless its comment says otherwise:
 *   - Return 0 on success and -1 on error. On error *errMsg is set to a
 *     message naming what is wrong; the caller owns it and frees it with
 *     K8sLeaseFree (plain free() works too: it is malloc'd). On success
 *     *errMsg is set to NULL. errMsg itself may be NULL: then no message is
 *     made.
 *   - Every pointer argument may be NULL without crashing: a NULL string
 *     argument is an error ("<name>: must not be NULL"), a NULL out-pointer
 *     is simply not written.
 *   - A lease is named by (ns, leaseName): ns must be a DNS-1123 label and
 *     leaseName a DNS-1123 subdomain. Names are checked before any network
 *     call.
 *   - A function whose name ends in Id acts on one election or holder watch,
 *     named by the id it got when it started, and never on a later one on
 *     the same lease; the others act on whatever runs on the lease now.
 *   - All functions are thread-safe. None may be called after fork() without
 *     exec (a Go runtime does not survive fork). The library can never be
 *     unloaded (dlclose is a no-op for Go libraries), and a process must not
 *     load two Go c-shared libraries (K8sLeaseInit refuses): a host that
 *     needs other Go code links one library that embeds k8s-lease.
 *   - Callbacks (holder watches, the log sink) run on threads the library
 *     owns, must not throw (a C++ exception must never unwind into the Go
 *     runtime), and may call any function of this library; each callback
 *     type says which thread and what to avoid.
 *   - A panic inside the library never reaches the host: a call returns -1
 *     with "internal error: ...", and a panic on one of the library's own
 *     threads ends that election (WaitElected / WaitLost return -1 with
 *     "internal error") or that holder watch, with an error log.
 *   - The fencing token is the Lease's spec.leaseTransitions written when
 *     this leadership was acquired: >= 1, and strictly greater than the token
 *     of every earlier leadership of the lease seen by the cluster (including
 *     re-acquisition by the same identity). Pass it to storage that can
 *     reject writes carrying a smaller token. The token cannot outlive the
 *     Lease object: deleting a Lease in use ends its holder's leadership at
 *     the next renewal, and the Lease is re-created (once the old term ran
 *     out) with a token above the highest this process saw, 1 for a process
 *     that never saw it; the library logs a warning when it re-creates a
 *     Lease. Do not delete a Lease in use, or tell the fenced storage.
 *
 * Guarantee: a process is leader (K8sLeaseIsLeader returns 1) only before
 * (send time of its last successful renewal) + renewDeadline on its
 * monotonic clock (when requests get slow, renewals are pipelined, one per
 * retry period, so latency up to renewDeadline - retryPeriod costs no
 * leadership). Another candidate takes over only a full leaseDuration
 * after it saw that renewal, and leaseDuration > renewDeadline. This holds
 * while process pauses stay below leaseDuration - renewDeadline and clock
 * rates differ by less than leaseDuration/renewDeadline. The assumptions,
 * the limits and the test that shows each guarantee: docs/guarantees.md.
 */
#ifndef K8S_LEASE_H
#define K8S_LEASE_H

#include <stddef.h>
#include <stdint.h>

/*
 * The version of this header: the repository's VERSION file, and what
 * K8sLeaseVersion returns in a library built from the same sources (tests
 * fail when the three differ). A program can compare K8S_LEASE_VERSION with
 * K8sLeaseVersion() to learn that it runs with another library than the
 * one it was built against.
 */
#define K8S_LEASE_VERSION_MAJOR 0
#define K8S_LEASE_VERSION_MINOR 1
#define K8S_LEASE_VERSION_PATCH 0
#define K8S_LEASE_VERSION "0.1.0"

#ifdef __cplusplus
extern "C" {
#endif

/* ======================================================================
 * 1. Init
 * ====================================================================== */

/*
 * K8sLeaseInit - connect to the cluster. Tries the in-cluster service
 * account, then the kubeconfig loading rules ($KUBECONFIG, else
 * ~/.kube/config); the error names every source tried. The environment
 * (KUBECONFIG, HOME, KUBERNETES_SERVICE_HOST/PORT, and K8S_LEASE_EVENTS:
 * "off" stops the Kubernetes Events recorded on the Lease when leadership
 * begins and ends; on by default, best effort; an unknown value fails Init,
 * naming the accepted ones) is read at the call, so a setenv() made by the
 * host before it is seen. Idempotent: later calls return 0 at once. Makes
 * no API call.
 * Optional: every function that needs the cluster (the elections,
 * GetHolder, WatchHolder, the Pod label functions) does the same on first
 * use, and a failed attempt is made again at the next such call. Call it to
 * get a configuration error early.
 * Refuses (-1, "another Go runtime is loaded in this process (<path>)...")
 * when another Go c-shared library is loaded: Go does not support two
 * runtimes in one process. The library that holds this code is never
 * "another": embedded in a host's own Go c-shared library, Init accepts.
 * Returns 0 or -1.
 */
int K8sLeaseInit(char** errMsg);

/*
 * K8sLeaseVersion - the library's version, "MAJOR.MINOR.PATCH" (compare
 * with K8S_LEASE_VERSION).
 * DO NOT FREE the result: it is a static string, the same pointer on every
 * call, never to be passed to K8sLeaseFree or free(), nor modified.
 */
const char* K8sLeaseVersion(void);

/*
 * K8sLeaseStandalone - returns 1. Defined by libk8s_lease_wrapper.so only:
 * a Go c-shared library that embeds k8s-lease exports every other function
 * of this header but not this one, so calling it ties a program to the
 * standalone library, and dlsym(RTLD_DEFAULT, "K8sLeaseStandalone") tells a
 * host which build it runs (non-NULL: the standalone library).
 */
int K8sLeaseStandalone(void);

/* ======================================================================
 * 2. Elect
 *
 * K8sLeaseRunElectionWith is the general function. K8sLeaseRunElection,
 * K8sLeaseRunElectionMs and K8sLeaseRunElectionMsId are conveniences kept
 * for compatibility: each is K8sLeaseRunElectionWith with no version,
 * priority 0 and no policy (and, but for MsId, no id out).
 * ====================================================================== */

/* Leader policies for K8sLeaseRunElectionWith (flags, or-ed). */
/* Cancelling a leading election (K8sLeaseCancelElection[Id], and
 * K8sLeaseShutdown) hands the lease to the best candidate seen alive in
 * this term - highest version, then highest priority; not one a hand-off
 * already failed on until it campaigns again - instead of releasing it to a
 * race; with none, or if it does not take the lease within
 * min(renew deadline, 1 s), the lease is released as usual. The cancel's
 * result is a plain cancel's; it takes up to the listing of the candidates
 * and that wait longer (each bounded as the release is). Listing the
 * candidates needs a permission of its own (docs/operations.md); without it
 * the policy falls back to a release. Candidates of library versions that
 * do not record the term they saw are never chosen (the lease is released
 * instead). */
#define K8S_LEASE_POLICY_HANDOFF_ON_CANCEL 1
/* While leading, hand the lease to the best candidate of a newer version as
 * soon as one campaigns (a rolling update then moves leadership once, to
 * the new version). WaitLost then returns -1 "leadership handed off to
 * <identity> (a newer version campaigns: <version>)". */
#define K8S_LEASE_POLICY_YIELD_TO_NEWER 2

/*
 * K8sLeaseRunElectionWith - start a candidacy on ns/leaseName as identity.
 * Returns at once (never waits for the network); campaigning, renewing and
 * releasing run in the background.
 *   leaseDurationMs, renewDeadlineMs, retryPeriodMs  client-go's timings:
 *       leaseDuration > renewDeadline > 1.2 * retryPeriod > 0. The lease
 *       duration must be a whole number of seconds >= 1000 ms (the Lease
 *       stores seconds); the renew deadline and retry period may be any
 *       number of milliseconds that keeps the rule.
 *   version   a semantic version ("1.4.2" or "v1.4.2"), or NULL/"" for none
 *             (older than any).
 *   priority  orders candidates of one version, higher preferred.
 *   policy    0 or K8S_LEASE_POLICY_* flags.
 *   electionId  (may be NULL) set to this candidacy's id: > 0, unique in the
 *             process, for the ...Id functions. An object that starts an
 *             election and must end only that one (never a later election
 *             on the same lease, such as the one that replaced it) ends it
 *             with K8sLeaseCancelElectionId.
 * Rules: identity non-empty, no control characters, at most 1024 bytes,
 * not starting "k8s-lease.io/hand-off:" (the holder of hand-off records).
 * One election per lease per process: a second one on the same lease is
 * refused until the first is cancelled or has ended.
 * Elections started together make their first round of requests at most 16
 * at a time per process, the others in turn (a burst of them leaves memory
 * behind); later requests - renewals, retries, a standby's takeover - never
 * wait. The wait counts in K8sLeaseWaitElected's timeout.
 * A standby observes the Lease (an API watch): it takes over at once when
 * the lease is released, and a full lease duration after the last renewal
 * it saw when the holder stops renewing. A candidacy on a lease this
 * process already observes (GetHolder asked about it, a holder watch, or an
 * earlier election) inherits that observation: when the holder stopped
 * renewing a lease duration ago by it, the candidacy takes over at once.
 * Every election records its candidacy so that a leader and
 * K8sLeaseCandidates can see it: a Kubernetes LeaseCandidate where the API
 * server serves them, else a coordination.k8s.io/v1 Lease named
 * "<lease>-candidate-<identity>" (the identity's hash where that is not a
 * valid name) labelled k8s-lease.io/candidate-of=<lease>. It is written
 * when the candidacy starts, every 5 minutes, and when the candidate sees a
 * new term (a new fencing token: the record names the highest it saw), and
 * deleted when it ends (K8sLeaseCancelElection[Id], K8sLeaseHandOff and
 * K8sLeaseWaitElected's timeout return once the delete is done, at most
 * 2 s more); a record that cannot be written (its RBAC:
 * docs/operations.md) is logged once and changes nothing else.
 * "Seen alive in this term": a hand-off the library makes on its own (the
 * policies, the preferred holder) goes only to a candidate whose record
 * names the leader's fencing token or a later one, so never to a replica
 * that died (SIGKILL, a lost node) before the term began, whose record
 * outlives it for 10 minutes; one that died during the term costs that
 * term one hand-off wait (below), and no later term.
 * The record is written off the caller's thread (the first one also asks
 * the API server which kind to use): RunElection never waits for it.
 * Whoever leads also honours the preferred holder an operator names on the
 * Lease (the annotation k8s-lease.io/preferred-holder, or
 * spec.preferredHolder where the API server keeps it): at its next renewal
 * the leader hands the lease to that identity if its record can be read
 * and is live, and no earlier hand-off to it failed since (WaitLost then
 * returns -1 "leadership handed off to <id> (the preferred holder)"; the
 * election stays, ended, as after a loss); one that does not campaign is
 * checked for again every 10 s. A hand-off the library makes on its own
 * waits at most min(renew deadline, 1 s) for the target, then releases.
 * A preferred holder also stops K8S_LEASE_POLICY_YIELD_TO_NEWER (the
 * operator's choice wins).
 * Returns 0, or -1 (no configuration, bad argument - timings, identity,
 * version not semantic, unknown policy flags - or election exists).
 */
int K8sLeaseRunElectionWith(const char* ns, const char* leaseName, const char* identity, long long leaseDurationMs,
                            long long renewDeadlineMs, long long retryPeriodMs, const char* version, int priority, int policy,
                            long long* electionId, char** errMsg);

/*
 * K8sLeaseRunElection - K8sLeaseRunElectionWith with the timings in whole
 * seconds, no description, no policy and no id.
 */
int K8sLeaseRunElection(const char* ns, const char* leaseName, const char* identity, int leaseDurationSec, int renewDeadlineSec,
                        int retryPeriodSec, char** errMsg);

/*
 * K8sLeaseRunElectionMs - K8sLeaseRunElectionWith with no description, no
 * policy and no id.
 */
int K8sLeaseRunElectionMs(const char* ns, const char* leaseName, const char* identity, long long leaseDurationMs,
                          long long renewDeadlineMs, long long retryPeriodMs, char** errMsg);

/*
 * K8sLeaseRunElectionMsId - K8sLeaseRunElectionWith with no description and
 * no policy; sets *electionId (may be NULL).
 */
int K8sLeaseRunElectionMsId(const char* ns, const char* leaseName, const char* identity, long long leaseDurationMs,
                            long long renewDeadlineMs, long long retryPeriodMs, long long* electionId, char** errMsg);

/* ======================================================================
 * 3. Wait
 * ====================================================================== */

/*
 * K8sLeaseWaitElected - block until this process leads ns/leaseName, for at
 * most timeoutSec (> 0) seconds. On success *fencingToken is the fencing
 * token. Returns 0 (leader), or -1 when: there is no election on the lease,
 * the timeout passed (the candidacy is then cancelled; the message ends
 * with "last API error: ..." when a request failed, e.g. "forbidden"), the
 * election was cancelled, leadership was already lost again, or the
 * candidacy gave up on an error no retry cures: a request the API server
 * rejects as invalid, or the fencing token exhausted (leaseTransitions at
 * 2^31-1; delete the Lease).
 * Errors an operator cures while the process runs - "forbidden" (RBAC
 * missing), "unauthorized" (a bad or rotated token), the namespace missing -
 * do not end the candidacy: they are logged at once as errors, counted in
 * K8sLeaseStats (api_errors, last_api_error), and retried with backoff
 * capped at 8 s, so the candidate is elected without a restart once the
 * Role, the token or the namespace is in place.
 */
int K8sLeaseWaitElected(const char* ns, const char* leaseName, int timeoutSec, long long* fencingToken, char** errMsg);

/*
 * K8sLeaseWaitLost - block until the leadership (or, if never elected, the
 * candidacy) on ns/leaseName ends. Returns 0 when it was ended by
 * K8sLeaseCancelElection or K8sLeaseShutdown, or at once when there is no
 * election; -1 with the reason otherwise: "renew deadline exceeded" (with
 * the last API error), "lease deleted by another writer", "lease taken by
 * another holder", "lease record edited by another writer", "leadership
 * handed off to ..." (the preferred holder, or a policy), or, for a
 * candidacy that never led, "cannot write lease ...: ... is invalid" and the
 * like (see K8sLeaseWaitElected).
 * After a loss the process must stop acting as leader; start a new
 * election to stand as a candidate again.
 */
int K8sLeaseWaitLost(const char* ns, const char* leaseName, char** errMsg);

/*
 * K8sLeaseWaitElectedId, K8sLeaseWaitLostId (and K8sLeaseIsLeaderId, under
 * Lead) - the same as K8sLeaseWaitElected, K8sLeaseWaitLost and
 * K8sLeaseIsLeader, for the election with id electionId (> 0, from
 * K8sLeaseRunElectionWith or K8sLeaseRunElectionMsId) only: never for a
 * later election on the lease. An election that ended and was replaced
 * keeps its outcome for these calls (the last 64 replaced are kept; an
 * older one, or one that was cancelled, reads as no election:
 * WaitElectedId returns -1 "no election", WaitLostId 0, IsLeaderId 0).
 */
int K8sLeaseWaitElectedId(const char* ns, const char* leaseName, long long electionId, int timeoutSec, long long* fencingToken,
                          char** errMsg);
int K8sLeaseWaitLostId(const char* ns, const char* leaseName, long long electionId, char** errMsg);
/* K8sLeaseWaitElectedMsId - K8sLeaseWaitElectedId with the timeout in
 * milliseconds: timeoutMs > 0. */
int K8sLeaseWaitElectedMsId(const char* ns, const char* leaseName, long long electionId, long long timeoutMs,
                            long long* fencingToken, char** errMsg);

/* ======================================================================
 * 4. Lead
 * ====================================================================== */

/*
 * K8sLeaseIsLeader - whether this process leads ns/leaseName right now. No
 * API call: 1 only while leadership is guaranteed (see the top of this
 * file). *fencingToken is the token and *validForMs how long the guarantee
 * lasts without a further renewal (both 0 when not leader). Cheap enough to
 * gate every unit of leader-only work.
 * Returns 1 (leader), 0 (not leader, or no election), -1 (bad argument).
 */
int K8sLeaseIsLeader(const char* ns, const char* leaseName, long long* fencingToken, long long* validForMs, char** errMsg);

/* K8sLeaseIsLeaderId - K8sLeaseIsLeader for one election: see
 * K8sLeaseWaitElectedId. */
int K8sLeaseIsLeaderId(const char* ns, const char* leaseName, long long electionId, long long* fencingToken, long long* validForMs,
                       char** errMsg);

/*
 * K8sLeasePublishEndpoint - route the selector-less Service `service` in ns
 * to address:port while the election electionId (> 0, from
 * K8sLeaseRunElectionWith or K8sLeaseRunElectionMsId) on ns/leaseName
 * leads. The Service then has exactly one endpoint, the leader's, in an
 * EndpointSlice named "<service>-leader" that the library manages
 * (labels kubernetes.io/service-name=<service> and
 * endpointslice.kubernetes.io/managed-by=leader-endpoint.k8s-lease.io; its
 * one port has no name, protocol TCP: give the Service one unnamed port).
 *   - The new leader writes it right after acquiring the Lease, on a thread
 *     of the library's (renewals never wait for it), by compare-and-swap,
 *     with its fencing token on the slice: a slice carrying a higher token
 *     is never replaced, so a predecessor that resumes or reconnects never
 *     routes traffic back to itself.
 *   - K8sLeaseWaitElected[Id] returns after that write's first attempt:
 *     call this function before it, and the leader starts serving once the
 *     Service routes to it. Called while the election leads (a free Lease
 *     can be taken before this call), it writes at once and returns after
 *     that first attempt (at most min(renewDeadline, 10 s)), so a
 *     WaitElected after it still returns after the write.
 *   - A graceful end (K8sLeaseCancelElection[Id], K8sLeaseShutdown, a
 *     hand-off) withdraws the endpoint before the Lease is released, within
 *     half of the release's bound (so those calls may take up to half as
 *     long again while the API server hangs); a loss withdraws it when the
 *     API server can be reached; the endpoint of a leader that died or was
 *     cut off stays until the next leader's write replaces it. If the next
 *     holder publishes none (a plain client-go candidate, an election
 *     without an endpoint) or the Lease is gone, a standby of this library
 *     with the endpoint configured empties the slice once it sees the
 *     Lease show another term (its watch, then at most
 *     min(renewDeadline, 10 s)); with no such standby running, the
 *     endpoint stays. A term stops writing once its leadership lapses. A slice of a later term (a higher
 *     token, the same token with another holder, or the Lease re-created
 *     with another UID) is never replaced. A write refused because the
 *     slice carries a higher token is counted ("superseded") and raises a
 *     Warning Event; while the election still leads, that token is stale
 *     (leaseTransitions lowered, say by a manifest applied again): the dead
 *     term's endpoint is emptied and the write retried every 1 s to 30 s;
 *     delete the slice to route to the leader.
 *   - The slice is created empty, then filled by a compare-and-swap, so a
 *     create of an older term that lands late never routes.
 *   - A failed write (RBAC, quota, the API server unreachable) is retried
 *     with backoff (1 s to 30 s), logged, counted
 *     (k8s_lease_endpoint_writes_total, K8sLeaseStats) and reported as a
 *     Warning Event on the Lease; it never changes the election. The
 *     Service itself is not read (no RBAC on Services is needed): a slice
 *     written before its Service exists is used once it does.
 * address is an IPv4 or IPv6 address the API server accepts in a slice
 * (not unspecified, loopback, link-local or multicast; no zone; an
 * IPv4-mapped IPv6 address is refused: write the IPv4 one); the slice's
 * addressType follows it. port is 1..65535, service a DNS-1035 label. One endpoint per election:
 * calling it again with the same arguments is a no-op.
 * Returns 0, or -1 (bad argument, no such election or it ended, the
 * election already publishes another endpoint).
 */
int K8sLeasePublishEndpoint(const char* ns, const char* leaseName, long long electionId, const char* service, const char* address,
                            int port, char** errMsg);

/*
 * K8sPatchPodLabel - set label labelKey=labelValue on Pod ns/podName with a
 * JSON merge patch (e.g. so a Service selects the leader). The key must be a
 * qualified name and the value a valid label value.
 * Returns 0, or -1 (bad argument, pod not found, forbidden, API error).
 */
int K8sPatchPodLabel(const char* ns, const char* podName, const char* labelKey, const char* labelValue, char** errMsg);

/*
 * K8sRemovePodLabel - remove label labelKey from Pod ns/podName; removing an
 * absent label is success.
 * Returns 0, or -1 (bad argument, pod not found, forbidden, API error).
 */
int K8sRemovePodLabel(const char* ns, const char* podName, const char* labelKey, char** errMsg);

/* K8sLeasePatchPodLabel - K8sPatchPodLabel, or with labelValue NULL (a JSON
 * merge patch's null) K8sRemovePodLabel. */
int K8sLeasePatchPodLabel(const char* ns, const char* podName, const char* labelKey, const char* labelValue, char** errMsg);

/* ======================================================================
 * 5. Cancel
 * ====================================================================== */

/*
 * K8sLeaseCancelElection - end the election on ns/leaseName. Synchronous:
 * when it returns, local leadership has ended (K8sLeaseIsLeader returns 0,
 * K8sLeaseWaitLost is woken with 0) and, if it led, the Lease has been
 * released (holder cleared, so a standby takes over at once) or the release
 * failed within min(renewDeadline, 10 s). Leadership ends before the release
 * is written, never after. A renewal the election sent on its own thread and
 * still on its way is not cut short (its write may land all the same): the
 * release waits for its answer, at most half the retry period (a few
 * milliseconds when the API server answers). Renewals sent beside each
 * other while the API server is slow are not waited for: one that lands
 * after the release fails its compare-and-swap. If it led, it returns once
 * the "stopped leading" Event is written too (after the release: a standby
 * takes over meanwhile; at most 2 s more), so a host that exits right after
 * it keeps that Event. With K8S_LEASE_POLICY_HANDOFF_ON_CANCEL it hands off
 * instead of releasing (see the policy). While another call ends the same
 * election (a K8sLeaseHandOff, a cancel on another thread,
 * K8sLeaseShutdown), it returns once that has ended it: from a holder
 * callback, that can block the callback for the hand-off's timeout.
 * Idempotent: no election is success.
 * Returns 0, or -1 (bad argument, release failed: the lease then expires).
 */
int K8sLeaseCancelElection(const char* ns, const char* leaseName, char** errMsg);

/*
 * K8sLeaseCancelElectionId - K8sLeaseCancelElection for the election with
 * id electionId (from K8sLeaseRunElectionWith or K8sLeaseRunElectionMsId)
 * only: when another election now runs on ns/leaseName, it is left alone
 * and 0 is returned, as when that election already ended.
 * Returns 0, or -1 (bad argument, electionId <= 0, release failed).
 */
int K8sLeaseCancelElectionId(const char* ns, const char* leaseName, long long electionId, char** errMsg);

/*
 * K8sLeaseShutdown - cancel every election (releasing held leases) and every
 * holder watch of this process, in parallel, waiting up to timeoutMs (> 0).
 * Holder watches stop as with K8sLeaseCancelWatch; called from a holder
 * callback, it does not wait for that callback (the caller), as
 * K8sLeaseCancelWatch does not. Elections with
 * K8S_LEASE_POLICY_HANDOFF_ON_CANCEL hand off as on a cancel. Hand-offs in
 * flight and the candidate records' deletes are waited for, and the
 * Kubernetes Events of the releases are flushed before it returns (at most
 * 2 s of the timeout). The library stays usable: new elections and holder
 * watches may be started afterwards.
 * Returns 0, or -1 (timeout, a release failed, bad argument).
 */
int K8sLeaseShutdown(int timeoutMs, char** errMsg);

/* ======================================================================
 * 6. Observe
 *
 * The process observes a lease (keeps a current view of its holder, from
 * one list and then an API watch) while an election, a holder watch or
 * K8sLeaseGetHolder uses it. While an election of this process leads the
 * lease, the library keeps no API watch on it: the view comes from the
 * leader's own renewals, and a foreign write shows once the next renewal
 * finds it (within a retry period).
 * ====================================================================== */

/*
 * K8sLeaseGetHolder - the current holder of ns/leaseName. *holderIdentity is
 * set to a new string owned by the caller (free with K8sLeaseFree), or NULL
 * when the lease has no holder (released, or not renewed for a lease
 * duration). *fencingToken is the fencing token.
 * The first call on a lease starts observing it (one list, whose answer it
 * waits for, at most 10 s, then an API watch) and every later call answers
 * locally, in about a microsecond, with no API call. Expiry is judged on
 * the monotonic clock from when this process saw the record last change,
 * never from the holder's renewTime: a holder seen for the first time is
 * reported for up to a lease duration after that first sight even if it
 * stopped renewing earlier (so "no holder" means a candidacy here can take
 * the lease at once, except after a release the holder did not write
 * itself, which a candidacy waits out: see docs/guarantees.md). During a
 * hand-off (K8sLeaseHandOff) not yet taken up, the holder is its target,
 * with the token of the term that handed off (see K8sLeaseHandOff). After
 * this process's own leadership ended by another writer's change, the
 * answer waits for a list (it never names this process's ended term).
 * The answer is always from a view kept current: a lease this process
 * stopped observing (its election ended and nothing else used it) is
 * listed again first. A lease no election or holder watch of this process
 * uses stays observed while it is asked about, and is dropped 1 to 1.5
 * minutes after the last call; at most 64 such leases are observed (asking
 * about one more drops the one asked about longest ago), so asking about
 * many names costs a bounded number of API watches.
 * Returns 0 (the Lease exists), 1 (the Lease does not exist), -1 (error: no
 * configuration, bad argument, the first list failed, e.g. forbidden).
 */
int K8sLeaseGetHolder(const char* ns, const char* leaseName, char** holderIdentity, long long* fencingToken, char** errMsg);

/*
 * k8s_lease_holder_change_cb_t - a holder watch's callback
 * (K8sLeaseWatchHolder).
 *   ctx              the callbackCtx given to K8sLeaseWatchHolder.
 *   holder           the holder identity, or NULL when there is none (Lease
 *                    absent, released, or not renewed for a lease duration).
 *                    Valid only during the call: copy it to keep it.
 *   holderSize       strlen(holder); 0 when holder is NULL.
 *   fencingToken     the fencing token of the Lease (0 when it is absent).
 * Runs on a thread owned by the library (it changes from call to call);
 * callbacks of one holder watch never run concurrently. Must not throw (a
 * C++ exception must never unwind into the library) and should return
 * quickly. From inside it, any function of this library may be called; see
 * K8sLeaseCancelWatch for cancelling from a callback.
 */
typedef void (*k8s_lease_holder_change_cb_t)(void* ctx, const char* holder, size_t holderSize, int64_t fencingToken);
/* The same type under its earlier name, kept so that code written with it
 * compiles unchanged. */
typedef k8s_lease_holder_change_cb_t holder_change_cb_t;

/*
 * K8sLeaseWatchHolder - start a holder watch: call
 * callbackFunc(callbackCtx, ...) once with the current holder (promptly
 * after the lease's view is synced), then once per change of (holder,
 * token), never for a mere renewal. A deleted Lease is reported as holder
 * NULL, token 0; a holder that stopped renewing as holder NULL within 1 s
 * of its expiry. The API watch under it reconnects with backoff after
 * errors or an API server restart and resyncs, so the final state is never
 * missed. While an election of this process leads the lease, changes come
 * from its renewals; observing by API watch resumes when it stops leading.
 * One holder watch per lease per process. callbackCtx is passed through
 * untouched and must stay valid until K8sLeaseCancelWatch returns.
 * Returns 0, or -1 (no configuration, bad argument, holder watch exists).
 */
int K8sLeaseWatchHolder(const char* ns, const char* leaseName, void* callbackCtx, k8s_lease_holder_change_cb_t callbackFunc,
                        char** errMsg);

/*
 * K8sLeaseWatchHolderId - K8sLeaseWatchHolder that also sets *watchId (may
 * be NULL) to this holder watch's id: > 0, unique in the process; stop it
 * with K8sLeaseCancelWatchId to stop only that one.
 */
int K8sLeaseWatchHolderId(const char* ns, const char* leaseName, void* callbackCtx, k8s_lease_holder_change_cb_t callbackFunc,
                          long long* watchId, char** errMsg);

/*
 * K8sLeaseCancelWatch - stop the holder watch on ns/leaseName. Synchronous:
 * when it returns, no callback of that holder watch (nor of an earlier one
 * on the lease still being stopped) is running or will run, so callbackCtx
 * may be freed; this holds for every caller, also when several threads
 * cancel at once. Called from inside that holder watch's own callback it
 * does not wait for itself (it still waits for an earlier holder watch on
 * the lease being stopped), and no callback runs after the current one
 * returns; a later K8sLeaseCancelWatch from another thread waits for that
 * callback to return. (Two callbacks of different holder watches must not
 * cancel each other's: each would wait for the other.) No holder watch is
 * success.
 * Returns 0, or -1 (bad argument).
 */
int K8sLeaseCancelWatch(const char* ns, const char* leaseName, char** errMsg);

/*
 * K8sLeaseCancelWatchId - K8sLeaseCancelWatch for the holder watch with id
 * watchId (from K8sLeaseWatchHolderId) only, waiting for that one alone;
 * another holder watch now on ns/leaseName is left alone. An id that no
 * longer runs is success.
 * Returns 0, or -1 (bad argument, watchId <= 0).
 */
int K8sLeaseCancelWatchId(const char* ns, const char* leaseName, long long watchId, char** errMsg);

/* ======================================================================
 * 7. Hand off
 * ====================================================================== */

/*
 * K8sLeaseHandOff - planned hand-off: this process stops leading
 * ns/leaseName and gives the lease to the candidate toIdentity, which, if it
 * campaigns, takes it at once (about two round trips to the API server).
 * Call it on the leader, say on SIGTERM, instead of K8sLeaseCancelElection.
 * First reads toIdentity's candidate record (one request, at most 10 s):
 * a target with no live record is refused and leadership is kept. Then
 * ends this leadership (after the answer to a renewal on its way, as
 * K8sLeaseCancelElection), writes the hand-off record, and blocks until
 * toIdentity leads (returns 0) or timeoutMs (> 0) passes after that write.
 * Safety as always: this process's IsLeader is 0 before the lease is
 * handed over, and the target's is 1 only after its own compare-and-swap
 * took it, with the next fencing token.
 * While the hand-off stands, no other candidate takes the lease: the
 * record's holder is "k8s-lease.io/hand-off:<toIdentity>", renewed at the
 * hand-off (annotation k8s-lease.io/handed-off-at holds that renewTime), so
 * every other candidate (ours, and plain client-go) waits this leader's
 * lease duration from seeing it; K8sLeaseGetHolder and holder watches
 * report toIdentity as the holder meanwhile, with the fencing token of the
 * term that handed off (the target's own, one higher, follows once it took
 * the lease: a transient pair, milliseconds long when the target
 * campaigns, that no leader acts on). A plain client-go candidate whose identity is that
 * holder name takes the record as its own and renews it: it is then a live
 * holder's record, which the target waits out and the timeout does not
 * release (the call returns -1: the lease changed before the target took
 * it). The "stopped leading" Event is written before the call returns (at
 * most 2 s more).
 * A target that is not campaigning therefore blocks the service at most
 * that long, and when timeoutMs passes first the hand-off record is
 * released for anyone to take (up to the renew deadline more) and annotated
 * k8s-lease.io/hand-off-failed, so the library's own hand-offs skip that
 * target until it campaigns again.
 * The election on the lease ends either way, as by K8sLeaseCancelElection
 * (K8sLeaseWaitLost returns 0); start a new one to stand again.
 * Returns 0, or -1 with the reason: not the leader (no election here, a
 * standby, or leadership already lost), toIdentity is this leader's own
 * identity or invalid, "target not seen campaigning" (no live record),
 * timeoutMs not > 0 or too large, the hand-off write failed (the lease is
 * then released instead, or expires; a write whose answer was lost but
 * that landed is a hand-off, waited for as above), "the lease changed
 * before the target took it", or "hand-off timed out ... the lease is
 * released".
 */
int K8sLeaseHandOff(const char* ns, const char* leaseName, const char* toIdentity, long long timeoutMs, char** errMsg);

/* K8sLeaseHandOffId - K8sLeaseHandOff of the election electionId only: a
 * later election on the lease is refused as no election. */
int K8sLeaseHandOffId(const char* ns, const char* leaseName, long long electionId, const char* toIdentity, long long timeoutMs,
                      char** errMsg);

/*
 * K8sLeaseCandidates - the live candidates of ns/leaseName (records renewed
 * within 10 minutes; a process that crashed stays listed until then), best
 * first (newest version, then highest priority), as a JSON array in
 * *candidatesJson (free with K8sLeaseFree):
 *   [{"identity", "version" (absent: none), "priority", "renew_time",
 *     "seen_token" (the highest fencing token it had seen when it wrote
 *     its record)}]
 * One list request. Returns 0, or -1 (bad argument, API error).
 */
int K8sLeaseCandidates(const char* ns, const char* leaseName, char** candidatesJson, char** errMsg);

/* ======================================================================
 * 8. Operate: logs, stats, metrics
 * ====================================================================== */

/*
 * k8s_lease_log_cb_t - receives the library's log messages and client-go's.
 *   level  0 error, 1 warning, 2 info, 3+ debug.
 *   msg    the message, without a trailing newline; valid only during the
 *          call.
 * Runs on one thread owned by the library: never the caller's thread,
 * never while the library holds a lock, never on the renewal path. Calls
 * are serialized and in order. Lines wait in a queue of 1024; when it is
 * full (a callback slower than the lines come) they are dropped and counted
 * ("log_lines_dropped" in K8sLeaseStats). From inside it, any function of
 * this library may be called, K8sLeaseSetLogger and K8sLeaseSetLogLevel
 * included. One cycle to avoid: K8sLeaseSetLogger waits for a log callback
 * in progress, so do not call it from a holder callback (or while holding a
 * lock) that the log callback may be waiting for, e.g. by cancelling that
 * holder watch. Must not throw (a C++ exception must never unwind into the
 * library).
 */
typedef void (*k8s_lease_log_cb_t)(void* ctx, int level, const char* msg, size_t msgSize);

/*
 * K8sLeaseSetLogger - route logs to callbackFunc(callbackCtx, ...); NULL
 * callbackFunc restores the default, standard error. When it returns, the
 * callback it replaced is not running and will not be called again (unless
 * it is called from that callback), so that callback's ctx may be freed.
 * Returns 0.
 */
int K8sLeaseSetLogger(void* callbackCtx, k8s_lease_log_cb_t callbackFunc, char** errMsg);

/*
 * K8sLeaseSetLogLevel - emit messages up to level: 0 errors, 1 warnings
 * (the default: quiet), 2 info (elections, losses, releases, API watch
 * restarts), 3 debug; 4..12 also raise client-go's verbosity (klog -v 1..9;
 * at 9 it logs every request, with credentials masked).
 * Returns 0, or -1 when level is outside 0..12.
 */
int K8sLeaseSetLogLevel(int level, char** errMsg);

/*
 * K8sLeaseStats - counters for every lease this process has used, as a JSON
 * string in *statsJson (free with K8sLeaseFree), for a host to export as
 * metrics. Counters are cumulative over the process's life:
 *   {"version": "...", "log_lines_dropped": N, "leases": [{"namespace", "name",
 *     "election": null or {"running", "leader", "fencing_token",
 *        "acquisitions", "releases", "hand_offs" (terms handed to a
 *        chosen candidate),
 *        "losses": {"renew_deadline", "deleted", "taken", "edited"},
 *        "renewals", "renew_errors", "api_errors" (failed acquisitions and
 *        renewals and reads of the Lease, conflicts excluded),
 *        "last_api_error" (absent when none: why the candidate is not
 *        elected, e.g. "... forbidden"; cleared once a request succeeds or
 *        another holder is the reason to wait), "conflicts" (acquisitions another
 *        writer won first: answered with 409, after which the Lease is read
 *        once before deciding again), "endpoint_writes" and
 *        "endpoint_failures" (writes of the leader's endpoint,
 *        K8sLeasePublishEndpoint, that landed and that failed, withdrawals
 *        included), "endpoint_superseded" (writes refused because the slice
 *        carries a higher token), "stale_endpoints_cleared" (slices of a
 *        term the Lease no longer shows that this candidacy emptied),
 *        "renew_latency_last_ms",
 *        "renew_latency_max_ms", "renew_latency_mean_ms"},
 *     "watching" (a holder watch runs), "watch_callbacks" (delivered),
 *     "watch_restarts" (the Lease's API watch ended by an error and was
 *     resumed), "watch_requests" (list and watch requests made to observe
 *     the Lease)}]}
 * Returns 0, or -1 (statsJson NULL).
 */
int K8sLeaseStats(char** statsJson, char** errMsg);

/*
 * K8sLeaseMetrics - the library's metrics in the Prometheus text exposition
 * format (version 0.0.4) in *text (free with K8sLeaseFree), for a host that
 * serves /metrics to append to its own output (serve it with
 * "Content-Type: text/plain; version=0.0.4"). Families:
 *   leader_election_master_status{name="<ns>/<lease>"} (gauge, client-go's:
 *     1 while leading), and, per lease an election of this process used:
 *   k8s_lease_elections_won_total, k8s_lease_leadership_ended_total{reason=
 *     released|handed_off|renew_deadline|taken|deleted|edited},
 *   k8s_lease_renewals_total{result=success|error},
 *   k8s_lease_renewal_duration_seconds (histogram),
 *   k8s_lease_campaign_duration_seconds (histogram: candidacy start to elected),
 *   k8s_lease_acquire_duration_seconds (histogram: lease judged free to held),
 *   k8s_lease_conflicts_total,
 *   k8s_lease_endpoint_writes_total{result=success|error|superseded}
 *     (K8sLeasePublishEndpoint), k8s_lease_stale_endpoints_cleared_total;
 *     per lease observed for an election or a
 *   holder watch:
 *   k8s_lease_watch_restarts_total; process-wide:
 *   k8s_lease_api_requests_total{verb,resource,code} (code "409" counts
 *     conflicts, "error" requests that got no answer),
 *   k8s_lease_log_lines_dropped_total and k8s_lease_goroutines (the
 *     library's goroutines: one per election or observed lease, plus a
 *     few).
 * Labels never hold an identity; the name label's values are the leases the
 * process used. Counters are cumulative over the process's life.
 * Returns 0, or -1 (text NULL).
 */
int K8sLeaseMetrics(char** text, char** errMsg);

/* ======================================================================
 * 9. Free
 * ====================================================================== */

/*
 * K8sLeaseFree - free a string returned by this library (*errMsg,
 * *holderIdentity, *statsJson, *text, *candidatesJson). NULL is ignored.
 * Never pass it K8sLeaseVersion's result (static: see there).
 */
void K8sLeaseFree(void* p);

#ifdef __cplusplus
}
#endif

#endif /* K8S_LEASE_H */
