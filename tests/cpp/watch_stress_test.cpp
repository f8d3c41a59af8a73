// CancelWatch is synchronous: the callback context is freed right after
// CancelWatch returns, cycle after cycle. Built with AddressSanitizer, so a
// single late callback is a heap-use-after-free and aborts the test.
#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "envtest_fixture.hpp"

using namespace k8s_lease_test;

namespace {

const char* S(const std::string& s) { return s.c_str(); }

constexpr uint64_t kAlive = 0x600DC0FFEE;

struct Ctx {
  uint64_t magic = kAlive;
  std::atomic<int> calls{0};
};

std::atomic<int> g_bad_magic{0};

void Callback(void* p, const char* holder, size_t size, int64_t) noexcept {
  auto* ctx = static_cast<Ctx*>(p);
  if (ctx->magic != kAlive) g_bad_magic++;
  if (holder && strlen(holder) != size) g_bad_magic++;
  ctx->calls++;
}

}  // namespace

TEST(WatchStress, CancelWatchThenFreeHasNoLateCallbacks) {
  ErrMsg err;
  std::string ns = kNamespace, l = UniqueLease("stress");
  // An election on the same lease keeps the shared observer synced, so
  // every new watch calls back at once and races with its CancelWatch.
  ASSERT_EQ(K8sLeaseRunElectionMs(S(ns), S(l), S("stress"), 5000, 4000, 1000, err.out()), 0) << err.str();
  ASSERT_EQ(K8sLeaseWaitElected(S(ns), S(l), 10, nullptr, err.out()), 0) << err.str();
  const int cycles = std::stoi(Env("K8S_LEASE_STRESS_CYCLES", "10000"));
  int delivered = 0;
  for (int i = 0; i < cycles; i++) {
    auto* ctx = new Ctx;
    ASSERT_EQ(K8sLeaseWatchHolder(S(ns), S(l), ctx, &Callback, err.out()), 0) << "cycle " << i << ": " << err.str();
    ASSERT_EQ(K8sLeaseCancelWatch(S(ns), S(l), err.out()), 0) << err.str();
    delivered += ctx->calls.load();
    ctx->magic = 0;
    delete ctx;  // any callback from now on is a use-after-free
  }
  EXPECT_EQ(g_bad_magic.load(), 0);
  EXPECT_GT(delivered, 0) << "no cycle delivered a callback: the race was never exercised";
  printf("[ stress   ] %d cycles, %d callbacks delivered before cancel, 0 late\n", cycles, delivered);
  ASSERT_EQ(K8sLeaseCancelElection(S(ns), S(l), err.out()), 0) << err.str();
}

namespace {

// A context whose callback sleeps on its first call; freed by whichever
// canceller returns last.
struct SlowCtx {
  uint64_t magic = kAlive;
  std::atomic<bool> entered{false};
};

void SlowCallback(void* p, const char*, size_t, int64_t) noexcept {
  auto* ctx = static_cast<SlowCtx*>(p);
  if (ctx->magic != kAlive) g_bad_magic++;
  if (!ctx->entered.exchange(true)) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  if (ctx->magic != kAlive) g_bad_magic++;  // freed under our feet
}

}  // namespace

// Two threads cancel the same watch while its callback runs: each returns
// only after the callback has returned, so the second may free the context.
TEST(WatchStress, ConcurrentCancellersBothWaitForTheCallback) {
  ErrMsg err;
  std::string ns = kNamespace, l = UniqueLease("two-cancellers");
  ASSERT_EQ(K8sLeaseRunElectionMs(S(ns), S(l), S("two-cancellers"), 5000, 4000, 1000, err.out()), 0) << err.str();
  ASSERT_EQ(K8sLeaseWaitElected(S(ns), S(l), 10, nullptr, err.out()), 0) << err.str();
  int bad_before = g_bad_magic.load();
  auto* ctx = new SlowCtx;
  ASSERT_EQ(K8sLeaseWatchHolder(S(ns), S(l), ctx, &SlowCallback, err.out()), 0) << err.str();
  while (!ctx->entered) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  // The first canceller waits for the callback; the second, a moment
  // later, frees the context as soon as its own CancelWatch returns.
  std::thread first([&] { EXPECT_EQ(K8sLeaseCancelWatch(S(ns), S(l), nullptr), 0); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::thread second([&] {
    EXPECT_EQ(K8sLeaseCancelWatch(S(ns), S(l), nullptr), 0);
    ctx->magic = 0;
    delete ctx;
  });
  first.join();
  second.join();
  EXPECT_EQ(g_bad_magic.load(), bad_before) << "the callback ran on a freed context";
  ASSERT_EQ(K8sLeaseCancelElection(S(ns), S(l), err.out()), 0) << err.str();
}
