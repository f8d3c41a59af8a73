// The header-only C++ wrapper (k8s_lease.hpp): RAII, errors as exceptions,
// a throwing callback that must not unwind into the library.
#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "envtest_fixture.hpp"
#include "k8s_lease.hpp"

using namespace k8s_lease_test;
using namespace std::chrono_literals;

namespace {
const k8s_lease::Timing kFast{2000ms, 1500ms, 400ms};
}

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
