/* Cost of K8sLeaseIsLeader and K8sLeaseGetHolder through the C ABI, as a C
 * host pays it (our first user polls GetHolder every 200 ms). Prints "name nanoseconds-per-call" lines (medians of
 * batches). usage: abi_bench NAMESPACE (KUBECONFIG in the environment) */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "k8s_lease_compat.h"

static long long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int cmp(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

/* Median over 21 batches of the per-call time of fn. */
#define MEASURE(name, calls, stmt)                         \
  do {                                                     \
    double per[21];                                        \
    for (int b = 0; b < 21; b++) {                         \
      long long t0 = now_ns();                             \
      for (int i = 0; i < (calls); i++) { stmt; }          \
      per[b] = (double)(now_ns() - t0) / (calls);          \
    }                                                      \
    qsort(per, 21, sizeof per[0], cmp);                    \
    printf("%s %.1f\n", name, per[10]);                    \
  } while (0)

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  char* ns = argv[1];
  char* err = NULL;
  char lease[64], other[64];
  snprintf(lease, sizeof lease, "abi-%d", getpid());
  snprintf(other, sizeof other, "abi-unobserved-%d", getpid());
  if (K8sLeaseInit(&err) != 0 ||
      K8sLeaseRunElectionMs(ns, lease, "abi", 15000, 10000, 2000, &err) != 0 ||
      K8sLeaseWaitElected(ns, lease, 30, NULL, &err) != 0) {
    fprintf(stderr, "abi_bench: %s\n", err ? err : "?");
    return 1;
  }
  long long token, valid;
  MEASURE("isleader_ns", 10000, K8sLeaseIsLeader(ns, lease, &token, &valid, NULL));
  MEASURE("getholder_observed_ns", 10000, {
    char* h = NULL;
    K8sLeaseGetHolder(ns, lease, &h, &token, NULL);
    K8sLeaseFree(h);
  });
  /* The first GetHolder on a lease starts following it (a list, then a
   * watch): one call on each of 21 new leases. */
  MEASURE("getholder_first_ns", 1, {
    static int seq = 0;
    char fresh[64];
    snprintf(fresh, sizeof fresh, "abi-first-%d-%d", getpid(), seq++);
    char* h = NULL;
    K8sLeaseGetHolder(ns, fresh, &h, &token, NULL);
    K8sLeaseFree(h);
  });
  /* A lease asked about before, with no election or watch on it: local. */
  {
    char* h = NULL;
    K8sLeaseGetHolder(ns, other, &h, &token, NULL);
    K8sLeaseFree(h);
  }
  MEASURE("getholder_asked_before_ns", 10000, {
    char* h = NULL;
    K8sLeaseGetHolder(ns, other, &h, &token, NULL);
    K8sLeaseFree(h);
  });
  K8sLeaseShutdown(5000, NULL);
  return 0;
}
