/* Code written against an earlier k8s_lease.h includes that header only
 * and calls the earlier forms (now declared in k8s_lease_compat.h, which
 * k8s_lease.h includes at its end): it must compile unchanged, as strict
 * C11 and as C++, every warning an error (an undeclared function is an
 * implicit declaration in C before gcc 14, undefined behaviour for long
 * long arguments, and an error in C++). With K8S_LEASE_NO_COMPAT defined,
 * k8s_lease.h declares its own functions only: the earlier forms' names
 * are then free (a declaration of them would conflict below).
 * `make header-check` compiles this file the four ways. */
#include "k8s_lease.h"

#ifdef K8S_LEASE_NO_COMPAT
#ifdef K8S_LEASE_COMPAT_H
#error "K8S_LEASE_NO_COMPAT is defined, yet k8s_lease.h included k8s_lease_compat.h"
#endif
static int K8sLeaseRunElection = 0; /* conflicts with the function, if declared */
typedef long holder_change_cb_t;    /* conflicts with the earlier callback type, if declared */

int main(void) { return K8sLeaseRunElection + (int)(holder_change_cb_t)0; }
#else
static void on_change(void* ctx, const char* holder, size_t holderSize, int64_t fencingToken) {
  (void)ctx;
  (void)holder;
  (void)holderSize;
  (void)fencingToken;
}

int main(void) {
  holder_change_cb_t cb = on_change; /* the callback type's earlier name */
  char* err = NULL;
  if (K8sLeaseWatchHolder("prod", "metadata-master", NULL, cb, &err) != 0 ||
      K8sLeaseRunElection("prod", "metadata-master", "replica-0", 15, 10, 2, &err) != 0) {
    K8sLeaseFree(err);
    return 1;
  }
  return K8sLeaseCancelElection("prod", "metadata-master", NULL);
}
#endif
