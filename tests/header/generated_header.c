/* The header cgo generates beside the library is what our first user's
 * build includes: it must compile as strict C11 with every warning an
 * error, and declare every function with the signature of the hand-written
 * headers, include/k8s_lease.h and include/k8s_lease_compat.h (a mismatch
 * is an incompatible-pointer error here, a missing declaration an
 * undeclared identifier).
 * Those declarations are written by hand in k8s_lease_wrapper.go; the
 * functions are defined in package capi. `make header-check` compiles this
 * file a second time, with K8S_LEASE_CHECK_CAPI defined, against the export
 * header cgo writes for package capi (its definitions' prototypes), so the
 * two cannot drift apart; a third time, with K8S_LEASE_CHECK_PUBLIC, against
 * the hand-written headers, whose read-only strings are const char*; and
 * links it as C++ against the library (the declarations have C linkage in
 * C++ too). check_exports.sh checks that every function the library exports
 * is listed here. */
#ifdef K8S_LEASE_CHECK_PUBLIC
#include "k8s_lease_compat.h"
typedef const char* in_str; /* a string the library only reads */
#else
#include "libk8s_lease_wrapper.h"
typedef char* in_str;
#endif

/* The callback types of include/k8s_lease.h: C11 accepts a typedef
 * repeated with the same type and rejects one that differs. */
typedef void (*holder_change_cb_t)(void* ctx, const char* holder, size_t holderSize, int64_t fencingToken);
typedef void (*k8s_lease_log_cb_t)(void* ctx, int level, const char* msg, size_t msgSize);

/* The policy flags of include/k8s_lease.h, in the headers that declare
 * K8sLeaseRunElectionWith: the hand-written one, and the generated one
 * (the cgo preamble; capi's export header has no preamble of ours). */
#ifndef K8S_LEASE_CHECK_CAPI
#if !defined(K8S_LEASE_POLICY_HANDOFF_ON_CANCEL) || !defined(K8S_LEASE_POLICY_YIELD_TO_NEWER)
#error "the K8S_LEASE_POLICY_* flags are not defined"
#endif
#if K8S_LEASE_POLICY_HANDOFF_ON_CANCEL != 1 || K8S_LEASE_POLICY_YIELD_TO_NEWER != 2
#error "the K8S_LEASE_POLICY_* flags differ from include/k8s_lease.h's"
#endif
#endif

struct k8s_lease_functions {
  int (*init)(char**);
  int (*run_election)(in_str, in_str, in_str, int, int, int, char**);
  int (*run_election_ms)(in_str, in_str, in_str, long long, long long, long long, char**);
  int (*wait_elected)(in_str, in_str, int, long long*, char**);
  int (*wait_lost)(in_str, in_str, char**);
  int (*cancel_election)(in_str, in_str, char**);
  int (*is_leader)(in_str, in_str, long long*, long long*, char**);
  int (*get_holder)(in_str, in_str, char**, long long*, char**);
  int (*watch_holder)(in_str, in_str, void*, holder_change_cb_t, char**);
  int (*cancel_watch)(in_str, in_str, char**);
  int (*patch_pod_label)(in_str, in_str, in_str, in_str, char**);
  int (*remove_pod_label)(in_str, in_str, in_str, char**);
  int (*shutdown)(int, char**);
  int (*set_logger)(void*, k8s_lease_log_cb_t, char**);
  int (*set_log_level)(int, char**);
  int (*stats)(char**, char**);
  int (*metrics)(char**, char**);
  int (*hand_off)(in_str, in_str, in_str, long long, char**);
  int (*run_election_with)(in_str, in_str, in_str, long long, long long, long long, in_str, int, int, long long*, char**);
  int (*candidates)(in_str, in_str, char**, char**);
  void (*free_string)(void*);
  in_str (*version)(void);
  int (*run_election_ms_id)(in_str, in_str, in_str, long long, long long, long long, long long*, char**);
  int (*cancel_election_id)(in_str, in_str, long long, char**);
  int (*watch_holder_id)(in_str, in_str, void*, holder_change_cb_t, long long*, char**);
  int (*cancel_watch_id)(in_str, in_str, long long, char**);
  int (*wait_elected_id)(in_str, in_str, long long, int, long long*, char**);
  int (*wait_lost_id)(in_str, in_str, long long, char**);
  int (*is_leader_id)(in_str, in_str, long long, long long*, long long*, char**);
  int (*publish_endpoint)(in_str, in_str, long long, in_str, in_str, int, char**);
  int (*wait_elected_ms_id)(in_str, in_str, long long, long long, long long*, char**);
  int (*hand_off_id)(in_str, in_str, long long, in_str, long long, char**);
  int (*lease_patch_pod_label)(in_str, in_str, in_str, in_str, char**);
#ifndef K8S_LEASE_CHECK_CAPI
  int (*standalone)(void); /* the standalone library's own export */
#endif
};

int main(void) {
  struct k8s_lease_functions f = {
      K8sLeaseInit,      K8sLeaseRunElection, K8sLeaseRunElectionMs, K8sLeaseWaitElected, K8sLeaseWaitLost,
      K8sLeaseCancelElection, K8sLeaseIsLeader, K8sLeaseGetHolder,   K8sLeaseWatchHolder, K8sLeaseCancelWatch,
      K8sPatchPodLabel,  K8sRemovePodLabel,   K8sLeaseShutdown,      K8sLeaseSetLogger,   K8sLeaseSetLogLevel,
      K8sLeaseStats,     K8sLeaseMetrics,     K8sLeaseHandOff,     K8sLeaseRunElectionWith, K8sLeaseCandidates, K8sLeaseFree,        K8sLeaseVersion,       K8sLeaseRunElectionMsId, K8sLeaseCancelElectionId,
      K8sLeaseWatchHolderId, K8sLeaseCancelWatchId, K8sLeaseWaitElectedId, K8sLeaseWaitLostId, K8sLeaseIsLeaderId,
      K8sLeasePublishEndpoint, K8sLeaseWaitElectedMsId, K8sLeaseHandOffId, K8sLeasePatchPodLabel,
#ifndef K8S_LEASE_CHECK_CAPI
      K8sLeaseStandalone,
#endif
  };
  return f.version == 0;
}
