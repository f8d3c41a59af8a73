// The library inside a real C++ host: signals the host receives or
// generates, host signal handlers installed with SA_ONSTACK, and fork+exec,
// all while the library's goroutines campaign, renew and watch.
#include <signal.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <thread>

#include <gtest/gtest.h>

#include "envtest_fixture.hpp"

using namespace k8s_lease_test;

namespace {

std::atomic<int> g_sigpipe{0}, g_sigchld{0}, g_sigprof{0};
int g_term_pipe[2];

void CountPipe(int) { g_sigpipe++; }
void CountChld(int) { g_sigchld++; }
void CountProf(int) { g_sigprof++; }
void OnTerm(int) {
  char c = 1;
  ssize_t r = write(g_term_pipe[1], &c, 1);
  (void)r;
}

// Installs a host handler the way the header asks (SA_ONSTACK) and restores
// the previous one on destruction.
class HostHandler {
 public:
  HostHandler(int sig, void (*fn)(int)) : sig_(sig) {
    struct sigaction sa = {};
    sa.sa_handler = fn;
    sa.sa_flags = SA_ONSTACK | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    EXPECT_EQ(sigaction(sig, &sa, &old_), 0);
  }
  ~HostHandler() { sigaction(sig_, &old_, nullptr); }

 private:
  int sig_;
  struct sigaction old_;
};

const char* S(const std::string& s) { return s.c_str(); }

// Fork then exec from the host: the child runs no Go code, so it works.
int ForkExec(const char* script) {
  pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", script, (char*)nullptr);
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

TEST(HostProcess, SignalsHandlersAndForkExecWhileLeading) {
  const std::string ns = kNamespace, lease = UniqueLease("proc");
  ErrMsg err;
  ASSERT_EQ(K8sLeaseInit(err.out()), 0) << err.str();
  ASSERT_EQ(K8sLeaseRunElectionMs(S(ns), S(lease), S("host"), 2000, 1500, 400, err.out()), 0) << err.str();
  long long token = 0;
  ASSERT_EQ(K8sLeaseWaitElected(S(ns), S(lease), 10, &token, err.out()), 0) << err.str();
  std::atomic<int> callbacks{0};
  auto cb = [](void* ctx, const char*, size_t, int64_t) { (*static_cast<std::atomic<int>*>(ctx))++; };
  ASSERT_EQ(K8sLeaseWatchHolder(S(ns), S(lease), &callbacks, cb, err.out()), 0) << err.str();
  ASSERT_EQ(pipe(g_term_pipe), 0);

  {
    HostHandler pipe_handler(SIGPIPE, CountPipe), chld_handler(SIGCHLD, CountChld), prof_handler(SIGPROF, CountProf),
        term_handler(SIGTERM, OnTerm);

    // SIGPIPE from a real write to a closed pipe, on a host thread.
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    close(fds[0]);
    std::thread writer([&] {
      for (int i = 0; i < 50; i++) EXPECT_EQ(write(fds[1], "x", 1), -1);
    });
    writer.join();
    close(fds[1]);
    for (int i = 0; i < 50; i++) kill(getpid(), SIGPIPE);

    // SIGPROF at 1 kHz (what a sampling profiler does) for a second.
    struct itimerval prof = {{0, 1000}, {0, 1000}}, off = {};
    ASSERT_EQ(setitimer(ITIMER_PROF, &prof, nullptr), 0);
    auto spin_until = MonoNowNs() + 1000000000LL;
    volatile long spin = 0;
    while (MonoNowNs() < spin_until) spin++;  // ITIMER_PROF counts CPU time

    // SIGCHLD from real children, each a fork then exec.
    for (int i = 0; i < 20; i++) ASSERT_EQ(ForkExec("exit 7"), 7);
    setitimer(ITIMER_PROF, &off, nullptr);

    // The host's own SIGTERM handler still runs.
    kill(getpid(), SIGTERM);
    char c = 0;
    ASSERT_EQ(read(g_term_pipe[0], &c, 1), 1);
    EXPECT_EQ(c, 1);
  }
  EXPECT_GE(g_sigpipe.load(), 50) << "host SIGPIPE handler";
  EXPECT_GE(g_sigchld.load(), 1) << "host SIGCHLD handler";
  EXPECT_GE(g_sigprof.load(), 1) << "host SIGPROF handler";

  // Through all of it the library kept leading: same token, renewals went on.
  usleep(2000000);  // longer than the 1.5 s renew deadline
  long long fencing = 0, valid_ms = 0;
  EXPECT_EQ(K8sLeaseIsLeader(S(ns), S(lease), &fencing, &valid_ms, err.out()), 1) << err.str();
  EXPECT_EQ(fencing, token);
  EXPECT_GE(callbacks.load(), 1);
  ASSERT_EQ(K8sLeaseCancelWatch(S(ns), S(lease), err.out()), 0) << err.str();
  ASSERT_EQ(K8sLeaseCancelElection(S(ns), S(lease), err.out()), 0) << err.str();
  close(g_term_pipe[0]);
  close(g_term_pipe[1]);
}
