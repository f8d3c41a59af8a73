// Several candidate processes compete for one lease while the test kills and
// restarts some of them; a checker then merges their logs and fails on any
// overlap of two leadership intervals or a token that does not rise.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "envtest_fixture.hpp"

using namespace k8s_lease_test;

namespace {

struct Interval {
  int pid;
  long long token;
  int64_t start, end;  // CLOCK_MONOTONIC ns
  std::string end_event;
};

// Reads "<ns> <pid> <event> <token>" lines and closes each elected interval
// at its released/lost line, or at the kill time of a killed process.
std::vector<Interval> ReadIntervals(const std::string& path, const std::map<int, int64_t>& killed_at) {
  std::ifstream in(path);
  std::map<int, Interval> open;
  std::vector<Interval> out;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    int64_t t;
    int pid;
    std::string event;
    long long token;
    if (!(fields >> t >> pid >> event >> token)) continue;
    if (event == "elected") {
      open[pid] = {pid, token, t, 0, ""};
    } else if (open.count(pid)) {
      Interval iv = open[pid];
      iv.end = t;
      iv.end_event = event;
      out.push_back(iv);
      open.erase(pid);
    }
  }
  for (auto& [pid, iv] : open) {
    auto k = killed_at.find(pid);
    iv.end = k != killed_at.end() ? k->second : INT64_MAX;  // still leading at the end
    iv.end_event = k != killed_at.end() ? "killed" : "open";
    out.push_back(iv);
  }
  std::sort(out.begin(), out.end(), [](const Interval& a, const Interval& b) { return a.start < b.start; });
  return out;
}

}  // namespace

TEST(MultiProcess, NoOverlapAndRisingTokensUnderChurnAndKills) {
  const std::string ns = kNamespace, lease = UniqueLease("mp");
  const std::string log = "/tmp/k8s-lease-mp-" + std::to_string(getpid()) + ".log";
  unlink(log.c_str());
  const std::string candidate = Env("K8S_LEASE_CANDIDATE", "./lease_candidate");
  const int kCandidates = 3, kSeconds = 20;
  std::map<std::string, pid_t> running;  // identity -> pid
  std::map<int, int64_t> killed_at;
  auto start = [&](const std::string& id, int seconds) {
    running[id] = Spawn({candidate, ns, lease, id, log, std::to_string(seconds)}, false).pid;
  };
  for (int i = 0; i < kCandidates; i++) start("cand-" + std::to_string(i), kSeconds);

  std::mt19937 rng(42);
  int64_t begin = MonoNowNs();
  for (int round = 0; round < 3; round++) {
    usleep(4000000);
    // SIGKILL one candidate at random (often the leader) and restart it
    // under the same identity: the new incarnation must not inherit the lease.
    std::string id = "cand-" + std::to_string(rng() % kCandidates);
    pid_t pid = running[id];
    kill(pid, SIGKILL);
    killed_at[pid] = MonoNowNs();
    waitpid(pid, nullptr, 0);
    int left = kSeconds - int((MonoNowNs() - begin) / 1000000000);
    start(id, std::max(left, 3));
  }
  for (auto& [id, pid] : running) {
    int status = WaitExit(pid, (kSeconds + 30) * 1000);
    EXPECT_TRUE(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << id << " (pid " << pid << ") exited with status " << status;
  }

  auto intervals = ReadIntervals(log, killed_at);
  ASSERT_GE(intervals.size(), 10u) << "too few leaderships to judge";
  for (size_t i = 1; i < intervals.size(); i++) {
    const auto& a = intervals[i - 1];
    const auto& b = intervals[i];
    EXPECT_GE(b.start, a.end) << "overlap: pid " << a.pid << " (token " << a.token << ", ended by " << a.end_event
                              << ") and pid " << b.pid << " (token " << b.token << ") by " << (a.end - b.start) / 1000
                              << " us";
    EXPECT_GT(b.token, a.token) << "token did not rise: " << a.token << " then " << b.token;
  }
  EXPECT_GE(intervals.front().token, 1);
  RecordProperty("leaderships", int(intervals.size()));
  printf("[ checker  ] %zu leaderships, tokens %lld..%lld, 0 overlaps allowed\n", intervals.size(),
         intervals.front().token, intervals.back().token);
  unlink(log.c_str());
}
