// Test fixture shared by the C++ tests: a real API server from
// cmd/envtest-server, launched as a subprocess, and small helpers.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "k8s_lease_compat.h"  // the tests call every export, the earlier forms too

namespace k8s_lease_test {

// The namespace every C++ test works in (created by envtest-server).
inline constexpr const char* kNamespace = "cpp-it";

// Owns an error message from the library and frees it with K8sLeaseFree.
class ErrMsg {
 public:
  ErrMsg() = default;
  ErrMsg(const ErrMsg&) = delete;
  ErrMsg& operator=(const ErrMsg&) = delete;
  ~ErrMsg() { K8sLeaseFree(msg_); }
  char** out() {
    K8sLeaseFree(msg_);
    msg_ = nullptr;
    return &msg_;
  }
  std::string str() const { return msg_ ? msg_ : ""; }
  bool empty() const { return msg_ == nullptr; }

 private:
  char* msg_ = nullptr;
};

// A child process started with posix_spawn.
struct Child {
  pid_t pid = -1;
  int stdout_fd = -1;
};

// Starts argv[0] with argv; its stdout is readable from stdout_fd when
// capture is set.
Child Spawn(const std::vector<std::string>& argv, bool capture);

// Reads one line from fd (without the newline), waiting up to timeout_ms.
bool ReadLine(int fd, std::string* line, int timeout_ms);

// waitpid with a timeout; returns the raw wait status or -1 on timeout.
int WaitExit(pid_t pid, int timeout_ms);

// Runs kubectl (from KUBEBUILDER_ASSETS) against the test server.
int Kubectl(const std::string& args);

// CLOCK_MONOTONIC in nanoseconds: comparable across processes.
int64_t MonoNowNs();

// A lease name unique to this test run.
std::string UniqueLease(const std::string& prefix);

// The kubeconfig of the running test server.
const std::string& Kubeconfig();

// Environment variable or fallback.
std::string Env(const char* name, const std::string& fallback = "");

}  // namespace k8s_lease_test
