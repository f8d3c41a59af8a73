// Every exported function with NULL, empty, over-long and malformed input:
// -1 with a message naming the problem, never a crash.
#include <climits>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "envtest_fixture.hpp"

using namespace k8s_lease_test;

namespace {

const char* S(const std::string& s) { return s.c_str(); }

const std::string kLong(300, 'a');  // too long for a name

void ExpectError(int rc, ErrMsg& err, const std::string& want) {
  EXPECT_EQ(rc, -1);
  EXPECT_NE(err.str().find(want), std::string::npos) << "message: " << err.str() << "\nwant: " << want;
}

}  // namespace

TEST(Api, VersionIsStatic) {
  const char* v = K8sLeaseVersion();
  ASSERT_NE(v, nullptr);
  EXPECT_GT(strlen(v), 0u);
  EXPECT_EQ(v, K8sLeaseVersion());
}

TEST(Api, InitIsIdempotent) {
  ErrMsg err;
  EXPECT_EQ(K8sLeaseInit(err.out()), 0) << err.str();
  EXPECT_TRUE(err.empty());
  EXPECT_EQ(K8sLeaseInit(nullptr), 0);
}

TEST(Api, NullArguments) {
  ErrMsg err;
  std::string ns = kNamespace, l = "x";
  ExpectError(K8sLeaseRunElection(nullptr, S(l), S("id"), 5, 4, 1, err.out()), err, "namespace: must not be NULL");
  ExpectError(K8sLeaseRunElection(S(ns), nullptr, S("id"), 5, 4, 1, err.out()), err, "lease name: must not be NULL");
  ExpectError(K8sLeaseRunElection(S(ns), S(l), nullptr, 5, 4, 1, err.out()), err, "identity: must not be NULL");
  ExpectError(K8sLeaseRunElectionMs(nullptr, S(l), S("id"), 5000, 4000, 1000, err.out()), err, "namespace");
  ExpectError(K8sLeaseWaitElected(nullptr, S(l), 1, nullptr, err.out()), err, "namespace: must not be NULL");
  ExpectError(K8sLeaseWaitLost(S(ns), nullptr, err.out()), err, "lease name: must not be NULL");
  ExpectError(K8sLeaseCancelElection(nullptr, nullptr, err.out()), err, "namespace: must not be NULL");
  ExpectError(K8sLeaseIsLeader(nullptr, S(l), nullptr, nullptr, err.out()), err, "namespace: must not be NULL");
  ExpectError(K8sLeaseGetHolder(S(ns), nullptr, nullptr, nullptr, err.out()), err, "lease name: must not be NULL");
  ExpectError(K8sLeaseWatchHolder(nullptr, S(l), nullptr, nullptr, err.out()), err, "namespace: must not be NULL");
  ExpectError(K8sLeaseWatchHolder(S(ns), S(l), nullptr, nullptr, err.out()), err, "callbackFunc: must not be NULL");
  ExpectError(K8sLeaseCancelWatch(S(ns), nullptr, err.out()), err, "lease name: must not be NULL");
  ExpectError(K8sPatchPodLabel(S(ns), S("p"), S("k"), nullptr, err.out()), err, "label value: must not be NULL");
  ExpectError(K8sPatchPodLabel(S(ns), nullptr, S("k"), S("v"), err.out()), err, "pod name: must not be NULL");
  ExpectError(K8sRemovePodLabel(S(ns), S("p"), nullptr, err.out()), err, "label key: must not be NULL");
  ExpectError(K8sLeaseShutdown(0, err.out()), err, "timeoutMs: must be > 0");
  K8sLeaseFree(nullptr);
  // A NULL errMsg: same return code, no message, no crash.
  EXPECT_EQ(K8sLeaseRunElection(nullptr, nullptr, nullptr, 5, 4, 1, nullptr), -1);
  EXPECT_EQ(K8sLeaseGetHolder(nullptr, nullptr, nullptr, nullptr, nullptr), -1);
  EXPECT_EQ(K8sLeaseIsLeader(nullptr, nullptr, nullptr, nullptr, nullptr), -1);
}

TEST(Api, MalformedNamesAndIdentities) {
  ErrMsg err;
  std::string ns = kNamespace;
  ExpectError(K8sLeaseRunElection(S(""), S("l"), S("id"), 5, 4, 1, err.out()), err, "namespace: must not be empty");
  ExpectError(K8sLeaseRunElection(S("Bad_NS"), S("l"), S("id"), 5, 4, 1, err.out()), err, "namespace \"Bad_NS\"");
  ExpectError(K8sLeaseRunElection(S(ns), S(""), S("id"), 5, 4, 1, err.out()), err, "lease name: must not be empty");
  ExpectError(K8sLeaseRunElection(S(ns), S("a/b"), S("id"), 5, 4, 1, err.out()), err, "lease name \"a/b\"");
  ExpectError(K8sLeaseRunElection(S(ns), S(kLong), S("id"), 5, 4, 1, err.out()), err, "lease name");
  ExpectError(K8sLeaseRunElection(S(kLong), S("l"), S("id"), 5, 4, 1, err.out()), err, "namespace");
  ExpectError(K8sLeaseRunElection(S(ns), S("l"), S(""), 5, 4, 1, err.out()), err, "identity: must not be empty");
  ExpectError(K8sLeaseRunElection(S(ns), S("l"), S("a\nb"), 5, 4, 1, err.out()), err, "control characters");
  ExpectError(K8sLeaseRunElection(S(ns), S("l"), S(std::string(2000, 'i')), 5, 4, 1, err.out()), err, "at most 1024 bytes");
  ExpectError(K8sLeaseGetHolder(S(ns), S("UPPER"), nullptr, nullptr, err.out()), err, "lease name \"UPPER\"");
  ExpectError(K8sLeaseCancelWatch(S("-x"), S("l"), err.out()), err, "namespace \"-x\"");
  ExpectError(K8sPatchPodLabel(S(ns), S("p"), S("bad key!"), S("v"), err.out()), err, "label key \"bad key!\"");
  ExpectError(K8sPatchPodLabel(S(ns), S("p"), S("k"), S("bad value!"), err.out()), err, "label value \"bad value!\"");
}

TEST(Api, BadTimings) {
  ErrMsg err;
  std::string ns = kNamespace;
  struct Case {
    long long lease, renew, retry;
    const char* want;
  } cases[] = {
      {0, 4000, 1000, "lease duration: must be > 0"},
      {5000, -1, 1000, "renew deadline: must be > 0"},
      {5000, 4000, 0, "retry period: must be > 0"},
      {500, 400, 100, "lease duration: must be >= 1s"},
      {2500, 2000, 100, "whole number of seconds"},
      {4000, 4000, 1000, "must be greater than renew deadline"},
      {5000, 1200, 1000, "greater than 1.2 x retry period"},
      {9223372036854775807LL, 4000, 1000, "overflows a duration"},
  };
  for (const auto& c : cases) {
    ExpectError(K8sLeaseRunElectionMs(S(ns), S("l"), S("id"), c.lease, c.renew, c.retry, err.out()), err, c.want);
  }
  ExpectError(K8sLeaseRunElection(S(ns), S("l"), S("id"), 10, 10, 2, err.out()), err, "greater than renew deadline");
  ExpectError(K8sLeaseRunElection(S(ns), S("l"), S("id"), -15, 10, 2, err.out()), err, "must be > 0");
  ExpectError(K8sLeaseWaitElected(S(ns), S("l"), 0, nullptr, err.out()), err, "timeoutSec: must be > 0");
  ExpectError(K8sLeaseWaitElected(S(ns), S("l"), -3, nullptr, err.out()), err, "timeoutSec: must be > 0");
}

TEST(Api, NoElectionAnswers) {
  ErrMsg err;
  std::string ns = kNamespace, l = UniqueLease("none");
  long long token = 9, valid = 9;
  EXPECT_EQ(K8sLeaseIsLeader(S(ns), S(l), &token, &valid, err.out()), 0) << err.str();
  EXPECT_EQ(token, 0);
  EXPECT_EQ(valid, 0);
  EXPECT_EQ(K8sLeaseWaitLost(S(ns), S(l), err.out()), 0) << err.str();
  EXPECT_EQ(K8sLeaseCancelElection(S(ns), S(l), err.out()), 0) << err.str();
  EXPECT_EQ(K8sLeaseCancelWatch(S(ns), S(l), err.out()), 0) << err.str();
  ExpectError(K8sLeaseWaitElected(S(ns), S(l), 1, nullptr, err.out()), err, "no election");
  ExpectError(K8sLeaseWaitElectedMsId(S(ns), S(l), 1, 1000, nullptr, err.out()), err, "no election");
  token = 9;  // zeroed on error too, as every out-parameter
  ExpectError(K8sLeaseWaitElectedMsId(S(ns), S(l), 1, 1000, &token, err.out()), err, "no election");
  EXPECT_EQ(token, 0);
  token = 9;
  ExpectError(K8sLeaseWaitElectedMsId(S(ns), S(l), 1, 0, &token, err.out()), err, "timeoutMs: must be > 0");
  EXPECT_EQ(token, 0);
  ExpectError(K8sLeaseHandOffId(S(ns), S(l), 1, S("b"), 1000, err.out()), err, "not the leader");
}

TEST(Api, GetHolderOfMissingLeaseReturnsOne) {
  ErrMsg err;
  std::string ns = kNamespace, l = UniqueLease("missing");
  char* holder = reinterpret_cast<char*>(0x1);
  long long token = 5;
  EXPECT_EQ(K8sLeaseGetHolder(S(ns), S(l), &holder, &token, err.out()), 1) << err.str();
  EXPECT_EQ(holder, nullptr);
  EXPECT_EQ(token, 0);
}

TEST(Api, PodLabel) {
  std::string pod = UniqueLease("pod");
  ASSERT_EQ(Kubectl("-n " + std::string(kNamespace) + " run " + pod + " --image=example.invalid/none --restart=Never >/dev/null"), 0);
  ErrMsg err;
  std::string ns = kNamespace;
  ASSERT_EQ(K8sPatchPodLabel(S(ns), S(pod), S("k8s-lease.io/leader"), S("true"), err.out()), 0) << err.str();
  EXPECT_EQ(Kubectl("-n " + ns + " get pods -l k8s-lease.io/leader=true -o name | grep -q pod/" + pod), 0);
  ASSERT_EQ(K8sRemovePodLabel(S(ns), S(pod), S("k8s-lease.io/leader"), err.out()), 0) << err.str();
  ASSERT_EQ(K8sRemovePodLabel(S(ns), S(pod), S("k8s-lease.io/leader"), err.out()), 0) << "absent label: " << err.str();
  EXPECT_NE(Kubectl("-n " + ns + " get pods -l k8s-lease.io/leader=true -o name | grep -q pod/" + pod), 0);
  ExpectError(K8sPatchPodLabel(S(ns), S("no-such-pod"), S("k"), S("v"), err.out()), err, "not found");
  // The main family's one call: a value sets, NULL removes.
  ASSERT_EQ(K8sLeasePatchPodLabel(S(ns), S(pod), S("k8s-lease.io/leader"), S("true"), err.out()), 0) << err.str();
  EXPECT_EQ(Kubectl("-n " + ns + " get pods -l k8s-lease.io/leader=true -o name | grep -q pod/" + pod), 0);
  ASSERT_EQ(K8sLeasePatchPodLabel(S(ns), S(pod), S("k8s-lease.io/leader"), nullptr, err.out()), 0) << err.str();
  ASSERT_EQ(K8sLeasePatchPodLabel(S(ns), S(pod), S("k8s-lease.io/leader"), nullptr, err.out()), 0) << "absent label: " << err.str();
  EXPECT_NE(Kubectl("-n " + ns + " get pods -l k8s-lease.io/leader=true -o name | grep -q pod/" + pod), 0);
  ExpectError(K8sLeasePatchPodLabel(S(ns), S("no-such-pod"), S("k"), nullptr, err.out()), err, "not found");
}

// Every function that takes a name, driven with each kind of bad name: -1
// and a message naming the argument, for every one of them.
TEST(Api, EveryFunctionRefusesEveryMalformedName) {
  const std::string ns = kNamespace;
  const std::string huge(1 << 20, 'a');  // 1 MiB
  const std::vector<std::string> bad = {"", huge, kLong, "\xff\xfe", "a\tb", "with space", "UPPER", "-lead", "trail-",
                                        "a..b", "a/b", "%2e%2e", "../x"};
  using Call = std::function<int(const char* ns, const char* name, char** err)>;
  const std::vector<std::pair<std::string, Call>> calls = {
      {"RunElection", [](const char* n, const char* l, char** e) { return K8sLeaseRunElection(n, l, "id", 5, 4, 1, e); }},
      {"RunElectionMs", [](const char* n, const char* l, char** e) { return K8sLeaseRunElectionMs(n, l, "id", 5000, 4000, 1000, e); }},
      {"WaitElected", [](const char* n, const char* l, char** e) { return K8sLeaseWaitElected(n, l, 1, nullptr, e); }},
      {"WaitLost", [](const char* n, const char* l, char** e) { return K8sLeaseWaitLost(n, l, e); }},
      {"CancelElection", [](const char* n, const char* l, char** e) { return K8sLeaseCancelElection(n, l, e); }},
      {"IsLeader", [](const char* n, const char* l, char** e) { return K8sLeaseIsLeader(n, l, nullptr, nullptr, e); }},
      {"GetHolder", [](const char* n, const char* l, char** e) { return K8sLeaseGetHolder(n, l, nullptr, nullptr, e); }},
      {"WatchHolder", [](const char* n, const char* l, char** e) {
         return K8sLeaseWatchHolder(n, l, nullptr, [](void*, const char*, size_t, int64_t) {}, e);
       }},
      {"CancelWatch", [](const char* n, const char* l, char** e) { return K8sLeaseCancelWatch(n, l, e); }},
      {"RunElectionMsId", [](const char* n, const char* l, char** e) {
         long long id = -1;
         int rc = K8sLeaseRunElectionMsId(n, l, "id", 5000, 4000, 1000, &id, e);
         return id == 0 ? rc : 0;  // a refusal leaves no id
       }},
      {"CancelElectionId", [](const char* n, const char* l, char** e) { return K8sLeaseCancelElectionId(n, l, 1, e); }},
      {"WatchHolderId", [](const char* n, const char* l, char** e) {
         long long id = -1;
         int rc = K8sLeaseWatchHolderId(n, l, nullptr, [](void*, const char*, size_t, int64_t) {}, &id, e);
         return id == 0 ? rc : 0;
       }},
      {"CancelWatchId", [](const char* n, const char* l, char** e) { return K8sLeaseCancelWatchId(n, l, 1, e); }},
      {"WaitElectedId", [](const char* n, const char* l, char** e) { return K8sLeaseWaitElectedId(n, l, 1, 1, nullptr, e); }},
      {"WaitLostId", [](const char* n, const char* l, char** e) { return K8sLeaseWaitLostId(n, l, 1, e); }},
      {"IsLeaderId", [](const char* n, const char* l, char** e) { return K8sLeaseIsLeaderId(n, l, 1, nullptr, nullptr, e); }},
      {"WaitElectedMsId", [](const char* n, const char* l, char** e) { return K8sLeaseWaitElectedMsId(n, l, 1, 1000, nullptr, e); }},
      {"PatchPodLabel", [](const char* n, const char* p, char** e) { return K8sPatchPodLabel(n, p, "k", "v", e); }},
      {"LeasePatchPodLabel", [](const char* n, const char* p, char** e) { return K8sLeasePatchPodLabel(n, p, "k", nullptr, e); }},
      {"RemovePodLabel", [](const char* n, const char* p, char** e) { return K8sRemovePodLabel(n, p, "k", e); }},
  };
  int checked = 0;
  for (const auto& [fn, call] : calls) {
    for (size_t i = 0; i < bad.size(); i++) {
      for (int which = 0; which < 2; which++) {  // as namespace, then as name
        std::string n = which == 0 ? bad[i] : ns, l = which == 0 ? "l" : bad[i];
        ErrMsg err;
        int rc = call(S(n), S(l), err.out());
        const std::string want = which == 0 ? "namespace" : (fn.find("Label") != std::string::npos ? "pod name" : "lease name");
        EXPECT_EQ(rc, -1) << fn << " accepted bad " << want << " #" << i;
        EXPECT_NE(err.str().find(want), std::string::npos) << fn << " bad " << want << " #" << i << ": " << err.str().substr(0, 200);
        EXPECT_LT(err.str().size(), 4096u) << fn << ": the message must not echo a huge argument in full";
        checked++;
      }
    }
  }
  RecordProperty("checked", checked);
}

TEST(Api, OutOfRangeNumbersAndMalformedLabelArguments) {
  ErrMsg err;
  const std::string ns = kNamespace;
  for (int level : {-1, 13, INT_MAX, INT_MIN}) ExpectError(K8sLeaseSetLogLevel(level, err.out()), err, "log level");
  for (int ms : {0, -1, INT_MIN}) ExpectError(K8sLeaseShutdown(ms, err.out()), err, "timeoutMs: must be > 0");
  ExpectError(K8sLeaseStats(nullptr, err.out()), err, "statsJson");
  ExpectError(K8sLeaseMetrics(nullptr, err.out()), err, "text: must not be NULL");
  ExpectError(K8sLeaseCandidates(S(ns), S("l"), nullptr, err.out()), err, "candidatesJson: must not be NULL");
  ExpectError(K8sLeaseHandOff(S(ns), S("l"), nullptr, 100, err.out()), err, "toIdentity: must not be NULL");
  ExpectError(K8sLeaseHandOff(S(ns), S("l"), S("b"), 0, err.out()), err, "timeoutMs: must be > 0");
  ExpectError(K8sLeaseHandOff(S(ns), S("l"), S("b"), 100, err.out()), err, "not the leader");
  ExpectError(K8sLeaseRunElectionWith(S(ns), S("l"), S("id"), 2000, 1500, 400, "latest", 0, 0, nullptr, err.out()), err,
              "must be a semantic version");
  ExpectError(K8sLeaseRunElectionWith(S(ns), S("l"), S("id"), 2000, 1500, 400, nullptr, 0, 64, nullptr, err.out()), err,
              "unknown flags 64");
  ExpectError(K8sLeaseRunElection(S(ns), S("l"), S("id"), INT_MAX, INT_MAX, 1, err.out()), err, "must be greater than renew deadline");
  ExpectError(K8sLeaseRunElection(S(ns), S("l"), S("id"), INT_MIN, 4, 1, err.out()), err, "lease duration: must be > 0");
  ExpectError(K8sLeaseRunElection(S(ns), S("l"), S("id"), 5, 4, INT_MIN, err.out()), err, "retry period: must be > 0");
  ExpectError(K8sLeaseRunElectionMs(S(ns), S("l"), S("id"), LLONG_MAX, 2, 1, err.out()), err, "overflows");
  ExpectError(K8sLeaseRunElectionMs(S(ns), S("l"), S("id"), LLONG_MIN, 2, 1, err.out()), err, "lease duration");
  for (long long id : {0LL, -1LL, LLONG_MIN}) {
    ExpectError(K8sLeaseCancelElectionId(S(ns), S("l"), id, err.out()), err, "electionId: must be > 0");
    ExpectError(K8sLeaseCancelWatchId(S(ns), S("l"), id, err.out()), err, "watchId: must be > 0");
    ExpectError(K8sLeaseWaitElectedId(S(ns), S("l"), id, 1, nullptr, err.out()), err, "electionId: must be > 0");
    ExpectError(K8sLeaseWaitLostId(S(ns), S("l"), id, err.out()), err, "electionId: must be > 0");
    ExpectError(K8sLeaseIsLeaderId(S(ns), S("l"), id, nullptr, nullptr, err.out()), err, "electionId: must be > 0");
    ExpectError(K8sLeaseWaitElectedMsId(S(ns), S("l"), id, 1000, nullptr, err.out()), err, "electionId: must be > 0");
    ExpectError(K8sLeaseHandOffId(S(ns), S("l"), id, S("b"), 100, err.out()), err, "electionId: must be > 0");
  }
  for (long long ms : {0LL, -1LL, LLONG_MIN})
    ExpectError(K8sLeaseWaitElectedMsId(S(ns), S("l"), 1, ms, nullptr, err.out()), err, "timeoutMs: must be > 0");
  ExpectError(K8sLeaseWaitElectedMsId(S(ns), S("l"), 1, LLONG_MAX, nullptr, err.out()), err, "timeoutMs: must be > 0 and at most");
  ExpectError(K8sLeaseHandOffId(S(ns), S("l"), 1, S("b"), 0, err.out()), err, "timeoutMs: must be > 0");
  ExpectError(K8sLeaseHandOffId(S(ns), S("l"), 1, nullptr, 100, err.out()), err, "toIdentity: must not be NULL");
  const std::string huge(1 << 20, 'k');
  for (const std::string& key : {std::string(""), huge, std::string("a/b/c"), std::string("/x"), std::string("k\xff")})
    ExpectError(K8sPatchPodLabel(S(ns), S("p"), S(key), S("v"), err.out()), err, "label key");
  for (const std::string& value : {huge, std::string("-x"), std::string("a b"), std::string("v\n")})
    ExpectError(K8sPatchPodLabel(S(ns), S("p"), S("k"), S(value), err.out()), err, "label value");
}
