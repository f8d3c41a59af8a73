// A host that links a second Go c-shared library besides ours: Go does not
// support two runtimes in one process, so K8sLeaseInit must refuse with a
// clear error instead of starting anything.
#include <gtest/gtest.h>

#include <string>

#include "k8s_lease_compat.h"

extern "C" int OtherGoAnswer(void);

TEST(TwoRuntimes, InitRefusesBesideAnotherGoLibrary) {
  ASSERT_EQ(OtherGoAnswer(), 42) << "the other Go library must be loaded and running";
  char* err = nullptr;
  ASSERT_EQ(K8sLeaseInit(&err), -1) << "Init accepted a process with two Go runtimes";
  ASSERT_NE(err, nullptr);
  std::string msg = err;
  K8sLeaseFree(err);
  EXPECT_NE(msg.find("another Go runtime is loaded"), std::string::npos) << msg;
  EXPECT_NE(msg.find("libother_go.so"), std::string::npos) << "the error must name the library: " << msg;
  // Functions that initialize on first use refuse the same way: nothing starts.
  err = nullptr;
  EXPECT_EQ(K8sLeaseRunElection("ns", "l", "a", 15, 10, 2, &err), -1);
  EXPECT_NE(std::string(err ? err : "").find("another Go runtime is loaded"), std::string::npos) << (err ? err : "");
  K8sLeaseFree(err);
}
