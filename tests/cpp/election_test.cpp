// One process: election lifecycle, WaitLost, GetHolder and WatchHolder
// through the C ABI.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "envtest_fixture.hpp"

using namespace k8s_lease_test;

namespace {

const char* S(const std::string& s) { return s.c_str(); }

struct Seen {
  std::string holder;  // "" for NULL
  bool null_holder;
  long long token;
  bool operator==(const Seen& o) const { return holder == o.holder && null_holder == o.null_holder && token == o.token; }
};

// Collects callbacks; noexcept so nothing can unwind into the library.
struct WatchLog {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Seen> seen;

  static void Callback(void* ctx, const char* holder, size_t size, int64_t token) noexcept {
    auto* self = static_cast<WatchLog*>(ctx);
    std::lock_guard<std::mutex> lock(self->mu);
    self->seen.push_back({holder ? std::string(holder, size) : "", holder == nullptr, token});
    self->cv.notify_all();
  }

  bool WaitFor(const Seen& want, int ms) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, std::chrono::milliseconds(ms), [&] { return !seen.empty() && seen.back() == want; });
  }
};

}  // namespace

TEST(Election, LifecycleThroughTheAbi) {
  ErrMsg err;
  std::string ns = kNamespace, l = UniqueLease("life");
  ASSERT_EQ(K8sLeaseRunElectionMs(S(ns), S(l), S("cpp-a"), 2000, 1500, 400, err.out()), 0) << err.str();
  ErrMsg dup;
  EXPECT_EQ(K8sLeaseRunElection(S(ns), S(l), S("cpp-b"), 5, 4, 1, dup.out()), -1);
  EXPECT_NE(dup.str().find("already running"), std::string::npos) << dup.str();

  long long token = 0;
  ASSERT_EQ(K8sLeaseWaitElected(S(ns), S(l), 10, &token, err.out()), 0) << err.str();
  EXPECT_GE(token, 1);

  long long fencing = 0, valid = 0;
  EXPECT_EQ(K8sLeaseIsLeader(S(ns), S(l), &fencing, &valid, err.out()), 1) << err.str();
  EXPECT_EQ(fencing, token);
  EXPECT_GT(valid, 0);
  EXPECT_LE(valid, 1500);

  char* holder = nullptr;
  long long holder_token = 0;
  ASSERT_EQ(K8sLeaseGetHolder(S(ns), S(l), &holder, &holder_token, err.out()), 0) << err.str();
  ASSERT_NE(holder, nullptr);
  EXPECT_STREQ(holder, "cpp-a");
  EXPECT_EQ(holder_token, token);
  K8sLeaseFree(holder);

  auto lost = std::async(std::launch::async, [&] {
    ErrMsg e;
    int rc = K8sLeaseWaitLost(S(ns), S(l), e.out());
    return std::make_pair(rc, e.str());
  });
  ASSERT_EQ(lost.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout) << "WaitLost returned while leading";
  ASSERT_EQ(K8sLeaseCancelElection(S(ns), S(l), err.out()), 0) << err.str();
  EXPECT_EQ(K8sLeaseIsLeader(S(ns), S(l), &fencing, &valid, err.out()), 0);
  ASSERT_EQ(lost.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  auto [rc, msg] = lost.get();
  EXPECT_EQ(rc, 0) << msg;
  EXPECT_EQ(K8sLeaseCancelElection(S(ns), S(l), err.out()), 0) << "second cancel: " << err.str();

  holder = reinterpret_cast<char*>(0x1);
  ASSERT_EQ(K8sLeaseGetHolder(S(ns), S(l), &holder, &holder_token, err.out()), 0) << err.str();
  EXPECT_EQ(holder, nullptr) << "released lease still has a holder";
  EXPECT_EQ(holder_token, token);

  // Same identity again: a greater token.
  ASSERT_EQ(K8sLeaseRunElectionMs(S(ns), S(l), S("cpp-a"), 2000, 1500, 400, err.out()), 0) << err.str();
  long long token2 = 0;
  ASSERT_EQ(K8sLeaseWaitElected(S(ns), S(l), 10, &token2, err.out()), 0) << err.str();
  EXPECT_GT(token2, token);
  ASSERT_EQ(K8sLeaseCancelElection(S(ns), S(l), err.out()), 0) << err.str();
}

TEST(Election, WatchHolderReportsChangesNotRenewals) {
  ErrMsg err;
  std::string ns = kNamespace, l = UniqueLease("watch");
  WatchLog log;
  ASSERT_EQ(K8sLeaseWatchHolder(S(ns), S(l), &log, &WatchLog::Callback, err.out()), 0) << err.str();
  EXPECT_TRUE(log.WaitFor({"", true, 0}, 5000)) << "no initial callback for an absent lease";
  ErrMsg dup;
  EXPECT_EQ(K8sLeaseWatchHolder(S(ns), S(l), &log, &WatchLog::Callback, dup.out()), -1);

  ASSERT_EQ(K8sLeaseRunElectionMs(S(ns), S(l), S("watched"), 2000, 1500, 400, err.out()), 0) << err.str();
  long long token = 0;
  ASSERT_EQ(K8sLeaseWaitElected(S(ns), S(l), 10, &token, err.out()), 0) << err.str();
  EXPECT_TRUE(log.WaitFor({"watched", false, token}, 5000));
  std::this_thread::sleep_for(std::chrono::milliseconds(1300));  // three renewals
  {
    std::lock_guard<std::mutex> lock(log.mu);
    EXPECT_EQ(log.seen.size(), 2u) << "renewals must not be reported";
  }
  ASSERT_EQ(K8sLeaseCancelElection(S(ns), S(l), err.out()), 0) << err.str();
  EXPECT_TRUE(log.WaitFor({"", true, token}, 5000)) << "release not reported";
  ASSERT_EQ(K8sLeaseCancelWatch(S(ns), S(l), err.out()), 0) << err.str();
}

TEST(Election, ShutdownReleasesEverythingAndStaysUsable) {
  ErrMsg err;
  std::string ns = kNamespace, l = UniqueLease("shutdown");
  WatchLog log;
  ASSERT_EQ(K8sLeaseRunElectionMs(S(ns), S(l), S("s"), 2000, 1500, 400, err.out()), 0) << err.str();
  ASSERT_EQ(K8sLeaseWaitElected(S(ns), S(l), 10, nullptr, err.out()), 0) << err.str();
  ASSERT_EQ(K8sLeaseWatchHolder(S(ns), S(l), &log, &WatchLog::Callback, err.out()), 0) << err.str();
  ASSERT_EQ(K8sLeaseShutdown(5000, err.out()), 0) << err.str();
  EXPECT_EQ(K8sLeaseIsLeader(S(ns), S(l), nullptr, nullptr, err.out()), 0);
  char* holder = nullptr;
  ASSERT_EQ(K8sLeaseGetHolder(S(ns), S(l), &holder, nullptr, err.out()), 0) << err.str();
  EXPECT_EQ(holder, nullptr) << "lease still held after Shutdown";
  K8sLeaseFree(holder);
  ASSERT_EQ(K8sLeaseRunElectionMs(S(ns), S(l), S("s"), 2000, 1500, 400, err.out()), 0) << err.str();
  ASSERT_EQ(K8sLeaseWaitElected(S(ns), S(l), 10, nullptr, err.out()), 0) << err.str();
  ASSERT_EQ(K8sLeaseCancelElection(S(ns), S(l), err.out()), 0) << err.str();
}

TEST(Election, WaitElectedTimeoutCancels) {
  ErrMsg err;
  std::string ns = kNamespace, l = UniqueLease("timeout");
  // Another process holds the lease: kubectl creates it with a live holder.
  std::string now_cmd = "date -u +%Y-%m-%dT%H:%M:%S.000000Z";
  std::string manifest =
      "printf 'apiVersion: coordination.k8s.io/v1\\nkind: Lease\\nmetadata: {name: " + l + ", namespace: " + ns +
      "}\\nspec: {holderIdentity: other, leaseDurationSeconds: 3600, renewTime: \"%s\"}\\n' \"$(" + now_cmd +
      ")\" | ";
  ASSERT_EQ(system((manifest + Env("KUBEBUILDER_ASSETS") + "/kubectl --kubeconfig " + Kubeconfig() + " apply -f - >/dev/null").c_str()), 0);
  ASSERT_EQ(K8sLeaseRunElectionMs(S(ns), S(l), S("me"), 2000, 1500, 400, err.out()), 0) << err.str();
  EXPECT_EQ(K8sLeaseWaitElected(S(ns), S(l), 1, nullptr, err.out()), -1);
  EXPECT_NE(err.str().find("timed out"), std::string::npos) << err.str();
  EXPECT_EQ(K8sLeaseWaitLost(S(ns), S(l), err.out()), 0) << "cancelled candidacy: " << err.str();
  ASSERT_EQ(K8sLeaseRunElectionMs(S(ns), S(l), S("me"), 2000, 1500, 400, err.out()), 0) << "new candidacy: " << err.str();
  ASSERT_EQ(K8sLeaseCancelElection(S(ns), S(l), err.out()), 0) << err.str();
}

namespace {

struct LogCapture {
  std::mutex mu;
  std::vector<std::pair<int, std::string>> lines;
  static void Callback(void* ctx, int level, const char* msg, size_t size) noexcept {
    auto* self = static_cast<LogCapture*>(ctx);
    std::lock_guard<std::mutex> lock(self->mu);
    self->lines.emplace_back(level, std::string(msg, size));
  }
  bool Has(int level, const std::string& part) {
    std::lock_guard<std::mutex> lock(mu);
    for (auto& [l, m] : lines)
      if (l == level && m.find(part) != std::string::npos) return true;
    return false;
  }
};

}  // namespace

TEST(Election, LoggerAndStats) {
  ErrMsg err;
  std::string ns = kNamespace, l = UniqueLease("stats");
  LogCapture logs;
  ASSERT_EQ(K8sLeaseSetLogger(&logs, &LogCapture::Callback, err.out()), 0) << err.str();
  ASSERT_EQ(K8sLeaseSetLogLevel(2, err.out()), 0) << err.str();
  ASSERT_EQ(K8sLeaseRunElectionMs(S(ns), S(l), S("logged"), 2000, 1500, 400, err.out()), 0) << err.str();
  ASSERT_EQ(K8sLeaseWaitElected(S(ns), S(l), 10, nullptr, err.out()), 0) << err.str();
  std::this_thread::sleep_for(std::chrono::milliseconds(900));  // two renewals
  ASSERT_EQ(K8sLeaseCancelElection(S(ns), S(l), err.out()), 0) << err.str();
  // Lines reach the callback on the library's own thread, soon after.
  auto eventually_has = [&logs](int level, const std::string& part) {
    for (int i = 0; i < 200 && !logs.Has(level, part); i++) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return logs.Has(level, part);
  };
  EXPECT_TRUE(eventually_has(2, "logged elected")) << "no info line about the election";
  EXPECT_TRUE(eventually_has(2, "logged released"));

  char* json = nullptr;
  ASSERT_EQ(K8sLeaseStats(&json, err.out()), 0) << err.str();
  ASSERT_NE(json, nullptr);
  std::string stats(json);
  K8sLeaseFree(json);
  auto at = stats.find("\"name\":\"" + l + "\"");
  ASSERT_NE(at, std::string::npos) << stats;
  std::string mine = stats.substr(at, stats.find("}}", at) - at);
  EXPECT_NE(mine.find("\"acquisitions\":1,"), std::string::npos) << mine;
  EXPECT_NE(mine.find("\"releases\":1,"), std::string::npos) << mine;
  EXPECT_EQ(mine.find("\"renewals\":0,"), std::string::npos) << "no renewals counted: " << mine;

  // The same, as Prometheus text (parsed with the reference parser in the Go tests).
  char* text = nullptr;
  ASSERT_EQ(K8sLeaseMetrics(&text, err.out()), 0) << err.str();
  ASSERT_NE(text, nullptr);
  std::string metrics(text);
  K8sLeaseFree(text);
  const std::string name = "name=\"" + std::string(kNamespace) + "/" + l + "\"";
  EXPECT_NE(metrics.find("leader_election_master_status{" + name + "} 0\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("k8s_lease_elections_won_total{" + name + "} 1\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("k8s_lease_leadership_ended_total{" + name + ",reason=\"released\"} 1\n"), std::string::npos) << metrics;

  EXPECT_EQ(K8sLeaseSetLogLevel(13, err.out()), -1);
  EXPECT_NE(err.str().find("log level"), std::string::npos) << err.str();
  ASSERT_EQ(K8sLeaseSetLogger(nullptr, nullptr, err.out()), 0) << err.str();  // back to stderr
  ASSERT_EQ(K8sLeaseSetLogLevel(1, err.out()), 0) << err.str();
}

namespace {

// A log callback that calls back into the library on every line, as a host
// that reports its state with each log line would.
struct ReentrantLogger {
  std::string ns, lease;
  std::atomic<int> calls{0};
  static void Callback(void* ctx, int, const char*, size_t) noexcept {
    auto* self = static_cast<ReentrantLogger*>(ctx);
    char* json = nullptr;
    if (K8sLeaseStats(&json, nullptr) == 0) K8sLeaseFree(json);
    K8sLeaseIsLeader(S(self->ns), S(self->lease), nullptr, nullptr, nullptr);
    K8sLeaseSetLogLevel(2, nullptr);
    self->calls++;
  }
};

}  // namespace

TEST(Election, LogCallbackMayCallTheLibrary) {
  ErrMsg err;
  ReentrantLogger logger;
  logger.ns = kNamespace;
  logger.lease = UniqueLease("reentrant-log");
  ASSERT_EQ(K8sLeaseSetLogger(&logger, &ReentrantLogger::Callback, err.out()), 0) << err.str();
  ASSERT_EQ(K8sLeaseSetLogLevel(2, err.out()), 0) << err.str();
  ASSERT_EQ(K8sLeaseRunElectionMs(S(logger.ns), S(logger.lease), S("reentrant"), 2000, 1500, 400, err.out()), 0) << err.str();
  ASSERT_EQ(K8sLeaseWaitElected(S(logger.ns), S(logger.lease), 10, nullptr, err.out()), 0) << err.str();
  EXPECT_EQ(K8sLeaseIsLeader(S(logger.ns), S(logger.lease), nullptr, nullptr, err.out()), 1) << err.str();
  ASSERT_EQ(K8sLeaseCancelElection(S(logger.ns), S(logger.lease), err.out()), 0) << err.str();
  for (int i = 0; i < 200 && logger.calls < 2; i++) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_GE(logger.calls.load(), 2) << "the elected and released lines were not delivered";
  ASSERT_EQ(K8sLeaseSetLogger(nullptr, nullptr, err.out()), 0) << err.str();  // waits for a call in progress
  ASSERT_EQ(K8sLeaseSetLogLevel(1, err.out()), 0) << err.str();
}

// A candidacy that describes itself: its record is listed by
// K8sLeaseCandidates; a hand-off to a candidate that does not campaign is
// refused and leadership is kept.
TEST(Election, CandidatesAndHandOffRefusal) {
  ErrMsg err;
  const std::string ns = kNamespace, l = UniqueLease("cand");
  long long id = 0;
  ASSERT_EQ(K8sLeaseRunElectionWith(S(ns), S(l), S("cpp-cand"), 2000, 1500, 400, "v1.2.3", 5,
                                    K8S_LEASE_POLICY_HANDOFF_ON_CANCEL, &id, err.out()),
            0)
      << err.str();
  long long token = 0;
  ASSERT_EQ(K8sLeaseWaitElectedId(S(ns), S(l), id, 10, &token, err.out()), 0) << err.str();
  std::string listed;
  for (int i = 0; i < 500 && listed.find("cpp-cand") == std::string::npos; i++) {
    char* json = nullptr;
    ASSERT_EQ(K8sLeaseCandidates(S(ns), S(l), &json, err.out()), 0) << err.str();
    listed = json;
    K8sLeaseFree(json);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_NE(listed.find("\"identity\":\"cpp-cand\",\"version\":\"v1.2.3\",\"priority\":5"), std::string::npos) << listed;

  EXPECT_EQ(K8sLeaseHandOff(S(ns), S(l), S("nobody"), 1000, err.out()), -1);
  EXPECT_NE(err.str().find("target not seen campaigning"), std::string::npos) << err.str();
  EXPECT_EQ(K8sLeaseIsLeaderId(S(ns), S(l), id, nullptr, nullptr, nullptr), 1) << "a refused hand-off ended the leadership";
  EXPECT_EQ(K8sLeaseHandOff(S(ns), S(l), S("cpp-cand"), 1000, err.out()), -1);
  EXPECT_NE(err.str().find("own identity"), std::string::npos) << err.str();
  // By handle: the same refusals; another handle is no election.
  EXPECT_EQ(K8sLeaseHandOffId(S(ns), S(l), id, S("nobody"), 1000, err.out()), -1);
  EXPECT_NE(err.str().find("target not seen campaigning"), std::string::npos) << err.str();
  EXPECT_EQ(K8sLeaseHandOffId(S(ns), S(l), id + 1000, S("nobody"), 1000, err.out()), -1);
  EXPECT_NE(err.str().find("no election"), std::string::npos) << err.str();
  EXPECT_EQ(K8sLeaseIsLeaderId(S(ns), S(l), id, nullptr, nullptr, nullptr), 1) << "a refused hand-off ended the leadership";
  // No other candidate: the policy falls back to a release.
  ASSERT_EQ(K8sLeaseCancelElectionId(S(ns), S(l), id, err.out()), 0) << err.str();
  EXPECT_EQ(K8sLeaseIsLeaderId(S(ns), S(l), id, nullptr, nullptr, nullptr), 0);
}
