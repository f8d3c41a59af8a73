// A host that needs another Go c-shared library besides k8s-lease (our
// first user's etcd client wrapper) links ONE library that embeds it:
// libembedding_go.so (tests/cpp/embedding_go: an export of its own plus
// `import _ "github.com/k8s-lease/k8s-lease/capi"`). This program links only
// that library, includes k8s_lease.h and declares the library's own export
// itself. One Go runtime, so K8sLeaseInit accepts (the fixture's set-up
// calls it too); then an election, a hand-off to a second process built the
// same way (lease_candidate.cpp linked with the embedding library), and a
// holder watch that sees every change.
#include <dlfcn.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "envtest_fixture.hpp"

// The embedding library's own export (its generated header would declare
// it with char*; the ABI is the same).
extern "C" int EmbedKVPut(const char* key, const char* value);
extern "C" char* EmbedKVGet(const char* key);

using namespace k8s_lease_test;

namespace {

const char* S(const std::string& s) { return s.c_str(); }

struct Seen {
  std::string holder;  // "" for NULL
  bool null_holder;
  long long token;
};

// Collects holder callbacks; noexcept so nothing can unwind into the library.
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

  // Waits until the latest state satisfies pred; returns it.
  bool WaitFor(const std::function<bool(const Seen&)>& pred, int ms, Seen* got = nullptr) {
    std::unique_lock<std::mutex> lock(mu);
    bool ok = cv.wait_for(lock, std::chrono::milliseconds(ms), [&] { return !seen.empty() && pred(seen.back()); });
    if (ok && got) *got = seen.back();
    return ok;
  }
  size_t Count() {
    std::lock_guard<std::mutex> lock(mu);
    return seen.size();
  }
};

// The name of the loaded object that defines symbol, "" when none does.
std::string DefiningObject(const char* symbol) {
  void* sym = dlsym(RTLD_DEFAULT, symbol);
  Dl_info info;
  if (sym == nullptr || dladdr(sym, &info) == 0 || info.dli_fname == nullptr) return "";
  return info.dli_fname;
}

// SIGKILLs a child still running when a test ends early.
struct ChildGuard {
  pid_t pid = -1;
  ~ChildGuard() {
    if (pid > 0 && WaitExit(pid, 0) == -1) {
      kill(pid, SIGKILL);
      WaitExit(pid, 10000);
    }
  }
};

// The token of the last "elected" line of a lease_candidate log, 0 if none.
long long ElectedToken(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  long long token = 0;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    long long at = 0, pid = 0, t = 0;
    std::string event;
    if (fields >> at >> pid >> event >> t && event == "elected") token = t;
  }
  return token;
}

}  // namespace

TEST(Embedding, OneLibraryOneRuntime) {
  // Every function of k8s_lease.h comes from the embedding library; the
  // standalone library is not loaded, and its own export is absent.
  EXPECT_NE(DefiningObject("K8sLeaseInit").find("libembedding_go.so"), std::string::npos) << DefiningObject("K8sLeaseInit");
  EXPECT_NE(DefiningObject("K8sLeaseWatchHolder").find("libembedding_go.so"), std::string::npos);
  EXPECT_NE(DefiningObject("EmbedKVPut").find("libembedding_go.so"), std::string::npos);
  EXPECT_EQ(dlopen("libk8s_lease_wrapper.so", RTLD_LAZY | RTLD_NOLOAD), nullptr);
  EXPECT_EQ(dlsym(RTLD_DEFAULT, "K8sLeaseStandalone"), nullptr) << "K8sLeaseStandalone is the standalone library's only";

  ErrMsg err;
  ASSERT_EQ(K8sLeaseInit(err.out()), 0) << "one Go runtime, ours embedded: Init must accept: " << err.str();
  ASSERT_STRNE(K8sLeaseVersion(), "");

  // The library's own export, served by the same runtime.
  ASSERT_EQ(EmbedKVPut("/mooncake/master", "addr-1"), 0);
  char* v = EmbedKVGet("/mooncake/master");
  ASSERT_NE(v, nullptr);
  EXPECT_STREQ(v, "addr-1");
  free(v);
  EXPECT_EQ(EmbedKVGet("/absent"), nullptr);
}

TEST(Embedding, ElectionHandOffAndWatch) {
  const std::string candidate = Env("K8S_LEASE_EMBEDDING_CANDIDATE");
  ASSERT_FALSE(candidate.empty()) << "K8S_LEASE_EMBEDDING_CANDIDATE is not set (ctest sets it)";
  ErrMsg err;
  const std::string ns = kNamespace, l = UniqueLease("embedded");

  WatchLog log;
  ASSERT_EQ(K8sLeaseWatchHolder(S(ns), S(l), &log, &WatchLog::Callback, err.out()), 0) << err.str();
  EXPECT_TRUE(log.WaitFor([](const Seen& s) { return s.null_holder && s.token == 0; }, 5000)) << "no initial callback";

  // Elected, in this process.
  ASSERT_EQ(K8sLeaseRunElectionMs(S(ns), S(l), S("embedded-a"), 2000, 1500, 400, err.out()), 0) << err.str();
  long long token = 0;
  ASSERT_EQ(K8sLeaseWaitElected(S(ns), S(l), 10, &token, err.out()), 0) << err.str();
  EXPECT_GE(token, 1);
  long long fencing = 0, valid = 0;
  EXPECT_EQ(K8sLeaseIsLeader(S(ns), S(l), &fencing, &valid, err.out()), 1) << err.str();
  EXPECT_EQ(fencing, token);
  EXPECT_GT(valid, 0);
  EXPECT_TRUE(log.WaitFor([&](const Seen& s) { return s.holder == "embedded-a" && s.token == token; }, 5000))
      << "the watch did not see this process elected";
  // As the master would: publish itself through the other Go API.
  ASSERT_EQ(EmbedKVPut(S(l), "embedded-a"), 0);

  // A standby in a second process, linked with the embedding library too.
  const std::string candidate_log = ::testing::TempDir() + l + ".log";
  unlink(candidate_log.c_str());
  ChildGuard standby;
  standby.pid = Spawn({candidate, "--namespace", ns, "--lease", l, "--identity", "embedded-b", "--log", candidate_log,
                       "--timing", "2000,1500,400", "--hold", "forever"},
                      false)
                    .pid;
  // It campaigns, but the lease is ours: we stay leader over several renewals.
  size_t before = log.Count();
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  EXPECT_EQ(K8sLeaseIsLeader(S(ns), S(l), &fencing, nullptr, err.out()), 1) << err.str();
  EXPECT_EQ(fencing, token);
  EXPECT_EQ(log.Count(), before) << "renewals must not be reported, and nobody else may lead";
  int early = WaitExit(standby.pid, 0);
  if (early != -1) standby.pid = -1;  // reaped
  ASSERT_EQ(early, -1) << "the standby exited";

  // Hand-off: we release, the standby takes over.
  auto released = std::chrono::steady_clock::now();
  ASSERT_EQ(K8sLeaseCancelElection(S(ns), S(l), err.out()), 0) << err.str();
  EXPECT_EQ(K8sLeaseIsLeader(S(ns), S(l), nullptr, nullptr, err.out()), 0);
  Seen b;
  ASSERT_TRUE(log.WaitFor([&](const Seen& s) { return s.holder == "embedded-b"; }, 10000, &b))
      << "the watch never saw the standby lead";
  auto handoff_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - released).count();
  EXPECT_GT(b.token, token) << "a new leadership has a greater token";
  EXPECT_LT(handoff_ms, 2000) << "a released lease is taken at once, not after the lease duration";
  RecordProperty("handoff_ms", std::to_string(handoff_ms));
  char* holder = nullptr;
  long long holder_token = 0;
  ASSERT_EQ(K8sLeaseGetHolder(S(ns), S(l), &holder, &holder_token, err.out()), 0) << err.str();
  ASSERT_NE(holder, nullptr);
  EXPECT_STREQ(holder, "embedded-b");
  EXPECT_EQ(holder_token, b.token);
  K8sLeaseFree(holder);
  for (int i = 0; i < 200 && ElectedToken(candidate_log) == 0; i++) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(ElectedToken(candidate_log), b.token) << "the standby's own log";

  // The standby stops (SIGTERM releases): the watch sees the lease free.
  ASSERT_EQ(kill(standby.pid, SIGTERM), 0);
  int status = WaitExit(standby.pid, 15000);
  EXPECT_TRUE(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0) << "standby exit status " << status;
  standby.pid = -1;
  EXPECT_TRUE(log.WaitFor([&](const Seen& s) { return s.null_holder && s.token == b.token; }, 5000))
      << "the standby's release was not seen";
  ASSERT_EQ(K8sLeaseCancelWatch(S(ns), S(l), err.out()), 0) << err.str();
  unlink(candidate_log.c_str());

  char* v = EmbedKVGet(S(l));
  ASSERT_NE(v, nullptr);
  EXPECT_STREQ(v, "embedded-a");
  free(v);
}
