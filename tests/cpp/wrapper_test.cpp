// The header-only C++ wrapper (k8s_lease.hpp): RAII, errors as exceptions,
// a throwing callback that must not unwind into the library.
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "envtest_fixture.hpp"
#include "k8s_lease.hpp"

using namespace k8s_lease_test;
using namespace std::chrono_literals;

namespace {
const k8s_lease::Timing kFast{2000ms, 1500ms, 400ms};
const char* S(const std::string& s) { return s.c_str(); }
}  // namespace

TEST(Wrapper, ElectionDestructorReleases) {
  std::string l = UniqueLease("raii");
  long long token = 0;
  {
    k8s_lease::Election e(kNamespace, l, "raii-a", kFast);
    auto t = e.WaitElected(10s);
    ASSERT_TRUE(t.has_value());
    token = *t;
    auto status = e.IsLeader();
    EXPECT_TRUE(status);
    EXPECT_EQ(status.fencing_token, token);
    EXPECT_GT(status.valid_for.count(), 0);
  }  // ~Election cancels and releases
  auto holder = k8s_lease::GetHolder(kNamespace, l);
  ASSERT_TRUE(holder.has_value());
  EXPECT_FALSE(holder->identity.has_value()) << "still held by " << *holder->identity;
  EXPECT_EQ(holder->fencing_token, token);
  EXPECT_FALSE(k8s_lease::GetHolder(kNamespace, UniqueLease("absent")).has_value());
}

TEST(Wrapper, ErrorsAreExceptionsAndTimeoutsAreValues) {
  EXPECT_THROW(k8s_lease::Election("Bad_NS", "l", "id"), k8s_lease::Error);
  try {
    k8s_lease::Election bad(kNamespace, "l", "id", k8s_lease::Timing{1500ms, 1000ms, 100ms});
    FAIL() << "fractional lease duration accepted";
  } catch (const k8s_lease::Error& e) {
    EXPECT_NE(std::string(e.what()).find("whole number of seconds"), std::string::npos) << e.what();
  }
  std::string l = UniqueLease("timeout");
  // Held by another process (made with kubectl): not elected within 1 s.
  ASSERT_EQ(Kubectl("-n " + std::string(kNamespace) + " create -f - >/dev/null <<EOF\n"
                    "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata: {name: " + l + "}\n"
                    "spec: {holderIdentity: other, leaseDurationSeconds: 3600}\nEOF"),
            0);
  k8s_lease::Election e(kNamespace, l, "late", kFast);
  std::string why;
  EXPECT_FALSE(e.WaitElected(1s, &why).has_value());
  EXPECT_NE(why.find("timed out"), std::string::npos) << why;
  EXPECT_EQ(e.WaitLost(), "") << "a timed-out candidacy is cancelled, not lost";
}

TEST(Wrapper, ThrowingCallbackDoesNotUnwindIntoTheLibrary) {
  std::string l = UniqueLease("throw");
  std::atomic<int> calls{0};
  {
    k8s_lease::HolderWatch watch(kNamespace, l, [&](const std::optional<std::string>&, long long) {
      calls++;
      throw std::runtime_error("user callback failure");
    });
    k8s_lease::Election e(kNamespace, l, "thrower", kFast);
    ASSERT_TRUE(e.WaitElected(10s));
    for (int i = 0; i < 200 && calls < 2; i++) std::this_thread::sleep_for(10ms);
  }
  EXPECT_GE(calls.load(), 2) << "the watch stopped after the first exception";
}

// `e = std::make_unique<Election>(...)` builds the new election before the
// old object is destroyed: the old destructor must end only its own
// candidacy (here already over), never the new one on the same lease.
TEST(Wrapper, ReassigningAnElectionKeepsTheNewOne) {
  std::string l = UniqueLease("reassign");
  auto e = std::make_unique<k8s_lease::Election>(kNamespace, l, "first", kFast);
  ASSERT_TRUE(e->WaitElected(10s));
  ASSERT_EQ(K8sLeaseCancelElection(S(kNamespace), S(l), nullptr), 0);  // its term ends (by name, from outside)
  e = std::make_unique<k8s_lease::Election>(kNamespace, l, "second", kFast);
  auto token = e->WaitElected(10s);
  ASSERT_TRUE(token.has_value()) << "the old Election's destructor ended the new election";
  EXPECT_TRUE(e->IsLeader());
}

// The same for a holder watch: the old object's destructor stops only its
// own watch, and the new one keeps calling back.
TEST(Wrapper, ReassigningAHolderWatchKeepsTheNewOne) {
  std::string l = UniqueLease("reassign-watch");
  std::atomic<int> second_calls{0};
  auto w = std::make_unique<k8s_lease::HolderWatch>(kNamespace, l, [](const std::optional<std::string>&, long long) {});
  ASSERT_EQ(K8sLeaseCancelWatch(S(kNamespace), S(l), nullptr), 0);  // stopped by name, from outside
  w = std::make_unique<k8s_lease::HolderWatch>(
      kNamespace, l, [&](const std::optional<std::string>&, long long) { second_calls++; });
  for (int i = 0; i < 500 && second_calls < 1; i++) std::this_thread::sleep_for(10ms);
  ASSERT_GE(second_calls.load(), 1) << "the new watch never called back";
  int before = second_calls.load();
  k8s_lease::Election e(kNamespace, l, "changer", kFast);  // a change the new watch must report
  ASSERT_TRUE(e.WaitElected(10s));
  for (int i = 0; i < 500 && second_calls == before; i++) std::this_thread::sleep_for(10ms);
  EXPECT_GT(second_calls.load(), before) << "the old HolderWatch's destructor stopped the new watch";
}

// An Election object whose candidacy ended does not reach the election that
// replaced it: IsLeader, WaitElected and WaitLost answer for its own.
TEST(Wrapper, AnEndedElectionDoesNotReachItsReplacement) {
  std::string l = UniqueLease("replaced");
  k8s_lease::Election first(kNamespace, l, "first", kFast);
  ASSERT_TRUE(first.WaitElected(10s));
  ASSERT_EQ(K8sLeaseCancelElection(S(kNamespace), S(l), nullptr), 0);  // ended from outside, by name
  k8s_lease::Election second(kNamespace, l, "second", kFast);
  ASSERT_TRUE(second.WaitElected(10s));
  EXPECT_FALSE(first.IsLeader()) << "the ended Election reports the new one's leadership";
  EXPECT_EQ(first.WaitLost(), "") << "WaitLost of the ended Election must not wait for the new one";
  std::string why;
  EXPECT_FALSE(first.WaitElected(1s, &why).has_value());
  EXPECT_TRUE(second.IsLeader()) << "the ended Election's WaitElected cancelled the new one";
  EXPECT_THROW(first.HandOff("third", 1s), k8s_lease::Error);
  EXPECT_TRUE(second.IsLeader()) << "the ended Election's HandOff reached the new one";
}

// What a candidate declares reaches its record; Candidates() lists it; a
// hand-off to a replica that does not campaign throws and keeps leadership.
TEST(Wrapper, OptionsCandidatesAndHandOff) {
  std::string l = UniqueLease("options");
  k8s_lease::ElectionOptions o;
  o.version = "2.1.0";
  o.priority = 7;
  o.policy = K8S_LEASE_POLICY_HANDOFF_ON_CANCEL;
  k8s_lease::Election e(kNamespace, l, "opt-a", kFast, o);
  ASSERT_TRUE(e.WaitElected(10s));
  std::string listed;
  for (int i = 0; i < 500 && listed.find("opt-a") == std::string::npos; i++) {
    listed = e.Candidates();
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_NE(listed.find("\"identity\":\"opt-a\",\"version\":\"2.1.0\",\"priority\":7"), std::string::npos) << listed;
  EXPECT_NE(k8s_lease::Candidates(kNamespace, l).find("opt-a"), std::string::npos);
  try {
    e.HandOff("nobody", 1s);
    FAIL() << "a hand-off to a replica that does not campaign succeeded";
  } catch (const k8s_lease::Error& err) {
    EXPECT_NE(std::string(err.what()).find("target not seen campaigning"), std::string::npos) << err.what();
  }
  EXPECT_TRUE(e.IsLeader()) << "a refused hand-off ended the leadership";
  EXPECT_THROW(k8s_lease::Election(kNamespace, l, "opt-b", kFast, k8s_lease::ElectionOptions{"latest", 0, 0}),
               k8s_lease::Error);
}

// Logs, stats and metrics through the wrapper.
TEST(Wrapper, LoggerStatsAndMetrics) {
  std::atomic<int> lines{0};
  k8s_lease::SetLogLevel(2);
  k8s_lease::SetLogger([&](int, const std::string& msg) {
    if (!msg.empty()) lines++;
  });
  std::string l = UniqueLease("logs");
  {
    k8s_lease::Election e(kNamespace, l, "log-a", kFast);
    ASSERT_TRUE(e.WaitElected(10s));
  }
  for (int i = 0; i < 500 && lines == 0; i++) std::this_thread::sleep_for(10ms);
  k8s_lease::SetLogger(nullptr);  // back to standard error; the sink is freed
  k8s_lease::SetLogLevel(1);
  EXPECT_GT(lines.load(), 0) << "no log line at level 2 for an election";
  EXPECT_THROW(k8s_lease::SetLogLevel(13), k8s_lease::Error);
  EXPECT_NE(k8s_lease::Stats().find("\"name\":\"" + l + "\""), std::string::npos);
  EXPECT_NE(k8s_lease::Metrics().find("k8s_lease_goroutines"), std::string::npos);
}

// WaitElected's invalid arguments are errors, not a timeout that
// cancelled the candidacy: it throws, and the election runs on.
TEST(Wrapper, WaitElectedThrowsOnInvalidArguments) {
  std::string l = UniqueLease("waitargs");
  k8s_lease::Election e(kNamespace, l, "args-a", kFast);
  for (auto bad : {0ms, -5ms, std::chrono::milliseconds::max()}) {
    try {
      std::string why;
      auto t = e.WaitElected(bad, &why);
      ADD_FAILURE() << "WaitElected(" << bad.count() << " ms) did not throw: "
                    << (t ? "elected" : "nullopt, why: " + why);
    } catch (const k8s_lease::Error& err) {
      EXPECT_NE(std::string(err.what()).find("timeoutMs"), std::string::npos) << err.what();
    }
  }
  auto token = e.WaitElected(10s);
  ASSERT_TRUE(token.has_value()) << "an invalid WaitElected cancelled the candidacy";
  EXPECT_TRUE(e.IsLeader());
}

// Shutdown's timeout is not truncated to an int: 2^32 ms is a long wait,
// not 0 ms (refused), and -(2^32) + 5 ms is refused, not 5 ms.
TEST(Wrapper, ShutdownDoesNotTruncateItsTimeout) {
  EXPECT_NO_THROW(k8s_lease::Shutdown(std::chrono::milliseconds(1LL << 32)));
  EXPECT_THROW(k8s_lease::Shutdown(std::chrono::milliseconds(-(1LL << 32) + 5)), k8s_lease::Error);
  EXPECT_THROW(k8s_lease::Shutdown(0ms), k8s_lease::Error);
}
