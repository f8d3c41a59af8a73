// The generated header, included from C++ with every warning an error.
#include "libk8s_lease_wrapper.h"

// The policy flags of include/k8s_lease.h (the cgo preamble's copy).
static_assert(K8S_LEASE_POLICY_HANDOFF_ON_CANCEL == 1 && K8S_LEASE_POLICY_YIELD_TO_NEWER == 2,
              "the K8S_LEASE_POLICY_* flags differ from include/k8s_lease.h's");

int main() {
  holder_change_cb_t holder_cb = nullptr;
  k8s_lease_log_cb_t log_cb = nullptr;
  int (*watch)(char*, char*, void*, holder_change_cb_t, char**) = K8sLeaseWatchHolder;
  int (*logger)(void*, k8s_lease_log_cb_t, char**) = K8sLeaseSetLogger;
  return holder_cb != nullptr || log_cb != nullptr || watch == nullptr || logger == nullptr;
}
