#include "envtest_fixture.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include <gtest/gtest.h>

extern char** environ;

namespace k8s_lease_test {
namespace {

std::string g_kubeconfig;

// Starts envtest-server before any test and stops it (SIGTERM) after all.
class EnvtestEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    std::string bin = Env("K8S_LEASE_ENVTEST_SERVER", "build/bin/envtest-server");
    server_ = Spawn({bin, "--namespace", kNamespace}, true);
    std::string path;
    if (!ReadLine(server_.stdout_fd, &path, 90000) || path.empty()) {
      FAIL() << bin << " printed no kubeconfig (is KUBEBUILDER_ASSETS set? run `make envtest-assets`)";
    }
    g_kubeconfig = path;
    setenv("KUBECONFIG", path.c_str(), 1);
    ErrMsg err;
    ASSERT_EQ(K8sLeaseInit(err.out()), 0) << err.str();
  }

  void TearDown() override {
    ErrMsg err;
    EXPECT_EQ(K8sLeaseShutdown(10000, err.out()), 0) << err.str();
    if (server_.pid > 0) {
      kill(server_.pid, SIGTERM);
      int status = WaitExit(server_.pid, 60000);
      EXPECT_TRUE(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0)
          << "envtest-server did not exit cleanly: status " << status;
    }
  }

 private:
  Child server_;
};

}  // namespace

std::string Env(const char* name, const std::string& fallback) {
  const char* v = getenv(name);
  return v && *v ? v : fallback;
}

const std::string& Kubeconfig() { return g_kubeconfig; }

Child Spawn(const std::vector<std::string>& argv, bool capture) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int fds[2] = {-1, -1};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (capture) {
    if (pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
    posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  }
  Child child;
  int rc = posix_spawn(&child.pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (capture) {
    close(fds[1]);
    child.stdout_fd = fds[0];
  }
  if (rc != 0) throw std::runtime_error("posix_spawn " + argv[0] + ": " + strerror(rc));
  return child;
}

bool ReadLine(int fd, std::string* line, int timeout_ms) {
  line->clear();
  int64_t deadline = MonoNowNs() + int64_t(timeout_ms) * 1000000;
  for (;;) {
    int64_t left_ms = (deadline - MonoNowNs()) / 1000000;
    if (left_ms <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, int(left_ms)) <= 0) continue;
    char c;
    ssize_t n = read(fd, &c, 1);
    if (n <= 0) return false;
    if (c == '\n') return true;
    line->push_back(c);
  }
}

int WaitExit(pid_t pid, int timeout_ms) {
  for (int waited = 0; waited <= timeout_ms; waited += 10) {
    int status = 0;
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    if (r < 0) return -1;
    usleep(10000);
  }
  return -1;
}

int Kubectl(const std::string& args) {
  std::string cmd = Env("KUBEBUILDER_ASSETS") + "/kubectl --kubeconfig " + g_kubeconfig + " " + args;
  return system(cmd.c_str());
}

int64_t MonoNowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

std::string UniqueLease(const std::string& prefix) {
  static std::atomic<int> seq{0};
  return prefix + "-" + std::to_string(getpid()) + "-" + std::to_string(seq++);
}

}  // namespace k8s_lease_test

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::AddGlobalTestEnvironment(new k8s_lease_test::EnvtestEnvironment);
  return RUN_ALL_TESTS();
}
