// Runs against a library built with -tags k8s_lease_panic_inject, once per
// injection point (K8S_LEASE_PANIC_AT is read by the library at load, so
// ctest sets it per test): a Go panic inside the library must reach C as -1
// with "internal error", and the host process must live on.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "k8s_lease_compat.h"

namespace {

std::string Take(char* msg) {
  std::string s = msg ? msg : "";
  K8sLeaseFree(msg);
  return s;
}

// No API call is needed to reach the injected panics: a kubeconfig pointing
// nowhere is enough for Init.
void InitWithDummyKubeconfig() {
  std::string path = "/tmp/k8s-lease-panic-kubeconfig-" + std::to_string(getpid());
  std::ofstream(path) << "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:1\n"
                         "contexts:\n- name: c\n  context:\n    cluster: c\n    user: u\nusers:\n- name: u\n  user: {}\n"
                         "current-context: c\n";
  setenv("KUBECONFIG", path.c_str(), 1);
  char* err = nullptr;
  ASSERT_EQ(K8sLeaseInit(&err), 0) << Take(err);
  unlink(path.c_str());
}

const char* Point() {
  const char* p = getenv("K8S_LEASE_PANIC_AT");
  return p ? p : "";
}

}  // namespace

TEST(InjectedPanic, InsideACallReturnsMinusOne) {
  if (std::string(Point()) != "call") GTEST_SKIP() << "K8S_LEASE_PANIC_AT is not call";
  InitWithDummyKubeconfig();
  char* err = nullptr;
  for (int i = 0; i < 3; i++) {  // again and again: the process lives
    ASSERT_EQ(K8sLeaseRunElection("ns", "l", "a", 15, 10, 2, &err), -1);
    std::string msg = Take(err);
    EXPECT_EQ(msg.rfind("internal error: injected panic at call", 0), 0u) << msg;
  }
  EXPECT_EQ(K8sLeaseIsLeader("ns", "l", nullptr, nullptr, nullptr), 0);
  EXPECT_NE(K8sLeaseVersion(), nullptr);
}

TEST(InjectedPanic, InAnElectionGoroutineEndsTheCandidacy) {
  if (std::string(Point()) != "campaign") GTEST_SKIP() << "K8S_LEASE_PANIC_AT is not campaign";
  InitWithDummyKubeconfig();
  char* err = nullptr;
  ASSERT_EQ(K8sLeaseRunElection("ns", "l", "a", 15, 10, 2, &err), 0) << Take(err);
  long long token = -1;
  ASSERT_EQ(K8sLeaseWaitElected("ns", "l", 5, &token, &err), -1);
  std::string msg = Take(err);
  EXPECT_NE(msg.find("internal error: panic: injected panic at campaign"), std::string::npos) << msg;
  EXPECT_EQ(K8sLeaseWaitLost("ns", "l", &err), -1);
  EXPECT_NE(Take(err).find("internal error"), std::string::npos);
  EXPECT_EQ(K8sLeaseIsLeader("ns", "l", nullptr, nullptr, nullptr), 0);
  EXPECT_EQ(K8sLeaseCancelElection("ns", "l", &err), 0) << Take(err);
  EXPECT_EQ(K8sLeaseShutdown(2000, &err), 0) << Take(err);
}
