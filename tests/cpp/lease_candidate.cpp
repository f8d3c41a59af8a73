// A candidate process for the multi-process tests: campaigns on one lease in
// a loop, holds leadership for a random while (gating "work" on
// K8sLeaseIsLeader), then steps down, and logs each leadership interval as
// lines "<CLOCK_MONOTONIC ns> <pid> <event> <token>" to a file.
//
// usage: lease_candidate NAMESPACE LEASE IDENTITY LOGFILE SECONDS
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>

#include "k8s_lease.h"

namespace {

long long MonoNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

FILE* g_log = nullptr;

void Log(const char* event, long long token) {
  fprintf(g_log, "%lld %d %s %lld\n", MonoNs(), getpid(), event, token);
  fflush(g_log);  // a SIGKILL must not lose what was logged
}

int Fail(const char* what, char* msg) {
  fprintf(stderr, "lease_candidate %d: %s: %s\n", getpid(), what, msg ? msg : "");
  K8sLeaseFree(msg);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 6) {
    fprintf(stderr, "usage: %s NAMESPACE LEASE IDENTITY LOGFILE SECONDS\n", argv[0]);
    return 2;
  }
  char *ns = argv[1], *lease = argv[2], *identity = argv[3];
  g_log = fopen(argv[4], "a");
  if (!g_log) return 2;
  long long end = MonoNs() + atoll(argv[5]) * 1000000000LL;
  std::mt19937 rng(getpid());
  char* err = nullptr;
  if (K8sLeaseInit(&err) != 0) return Fail("init", err);
  while (MonoNs() < end) {
    if (K8sLeaseRunElectionMs(ns, lease, identity, 2000, 1500, 400, &err) != 0) return Fail("run", err);
    long long token = 0;
    if (K8sLeaseWaitElected(ns, lease, 30, &token, &err) != 0) {
      K8sLeaseFree(err);
      err = nullptr;
      continue;  // timed out (candidacy cancelled) or lost: campaign again
    }
    Log("elected", token);
    long long hold_until = MonoNs() + (50 + rng() % 250) * 1000000LL;
    long long fencing = 0;
    while (MonoNs() < hold_until && K8sLeaseIsLeader(ns, lease, &fencing, nullptr, nullptr) == 1) {
      usleep(2000);  // leader-only work would go here
    }
    bool still_leader = K8sLeaseIsLeader(ns, lease, &fencing, nullptr, nullptr) == 1;
    // Leadership ends locally inside CancelElection before the release is
    // written; logging first keeps the logged interval inside the real one.
    Log(still_leader ? "released" : "lost", token);
    if (K8sLeaseCancelElection(ns, lease, &err) != 0) return Fail("cancel", err);
    usleep((rng() % 100) * 1000);  // let another candidate win sometimes
  }
  if (K8sLeaseShutdown(5000, &err) != 0) return Fail("shutdown", err);
  fclose(g_log);
  return 0;
}
