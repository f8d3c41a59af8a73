// k8s_lease.hpp - header-only C++17 wrapper over k8s_lease.h: every
// operation of the C API, on RAII objects that hold their handle.
//
// Errors: functions throw k8s_lease::Error (a std::runtime_error carrying the
// library's message) when the C call returns -1, except where a result type
// says otherwise: Election::WaitElected returns std::nullopt (with the reason
// in *why) because not being elected within a timeout is an ordinary outcome
// (it still throws for an invalid timeout), Election::WaitLost returns the
// reason as a string, and IsLeader never fails once the Election exists.
// Destructors never throw.
//
// Threading: everything here may be called from any thread. HolderWatch
// callbacks run on a library thread, one at a time per holder watch; an
// exception thrown by a callback is caught by the shim (it must never unwind
// into the Go runtime) and reported to std::cerr.
#ifndef K8S_LEASE_HPP
#define K8S_LEASE_HPP

#include <chrono>
#include <climits>
#include <cstdint>
#include <exception>
#include <functional>
#include <iostream>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "k8s_lease.h"

namespace k8s_lease {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {

// Owns a message from the library.
class Message {
 public:
  Message() = default;
  Message(const Message&) = delete;
  Message& operator=(const Message&) = delete;
  ~Message() { K8sLeaseFree(p_); }
  char** out() { return &p_; }
  std::string str() const { return p_ ? p_ : "unknown error"; }

 private:
  char* p_ = nullptr;
};

inline const char* c(const std::string& s) { return s.c_str(); }

inline void check(int rc, const Message& m, const char* what) {
  if (rc < 0) throw Error(std::string(what) + ": " + m.str());
}

// The longest timeout in milliseconds the library accepts (a Go
// time.Duration's range: (2^63 - 1) ns).
constexpr long long kMaxTimeoutMs = 9223372036854LL;

// Takes a string the library returned (nullptr: "").
inline std::string take(char* p) {
  std::string s = p ? p : "";
  K8sLeaseFree(p);
  return s;
}

}  // namespace detail

// Election timing (client-go's). The lease duration must be whole seconds.
struct Timing {
  std::chrono::milliseconds lease_duration{15000};
  std::chrono::milliseconds renew_deadline{10000};
  std::chrono::milliseconds retry_period{2000};
};

// What a candidate declares, and its leader policies (K8sLeaseRunElectionWith).
struct ElectionOptions {
  std::string version;  // semantic ("1.4.2"); "": none, older than any
  int priority = 0;     // among candidates of one version, higher preferred
  int policy = 0;       // K8S_LEASE_POLICY_* flags
};

struct LeaderStatus {
  bool leader = false;
  long long fencing_token = 0;
  std::chrono::milliseconds valid_for{0};
  explicit operator bool() const { return leader; }
};

struct Holder {
  std::optional<std::string> identity;  // nullopt: released or expired
  long long fencing_token = 0;
};

// Init connects to the cluster (in-cluster, else $KUBECONFIG, else
// ~/.kube/config). Idempotent.
inline void Init() {
  detail::Message m;
  detail::check(K8sLeaseInit(m.out()), m, "k8s_lease::Init");
}

// Version copies K8sLeaseVersion()'s static string (never freed).
inline std::string Version() { return K8sLeaseVersion(); }

// GetHolder returns std::nullopt when the Lease does not exist.
inline std::optional<Holder> GetHolder(const std::string& ns, const std::string& lease) {
  detail::Message m;
  char* holder = nullptr;
  long long token = 0;
  int rc = K8sLeaseGetHolder(detail::c(ns), detail::c(lease), &holder, &token, m.out());
  detail::check(rc, m, "k8s_lease::GetHolder");
  if (rc == 1) return std::nullopt;
  Holder h;
  h.fencing_token = token;
  if (holder) {
    h.identity = holder;
    K8sLeaseFree(holder);
  }
  return h;
}

// PatchPodLabel sets label key=value on Pod ns/pod (K8sLeasePatchPodLabel),
// e.g. so that a Service selects the leader.
inline void PatchPodLabel(const std::string& ns, const std::string& pod, const std::string& key, const std::string& value) {
  detail::Message m;
  detail::check(K8sLeasePatchPodLabel(detail::c(ns), detail::c(pod), detail::c(key), detail::c(value), m.out()), m,
                "k8s_lease::PatchPodLabel");
}

// SetPodLabel is PatchPodLabel's earlier name, kept so that code written
// with it still compiles (with a deprecation warning).
[[deprecated("use k8s_lease::PatchPodLabel")]] inline void SetPodLabel(const std::string& ns, const std::string& pod,
                                                                      const std::string& key, const std::string& value) {
  PatchPodLabel(ns, pod, key, value);
}

// RemovePodLabel removes it (K8sLeasePatchPodLabel with no value); an
// absent label is success.
inline void RemovePodLabel(const std::string& ns, const std::string& pod, const std::string& key) {
  detail::Message m;
  detail::check(K8sLeasePatchPodLabel(detail::c(ns), detail::c(pod), detail::c(key), nullptr, m.out()), m,
                "k8s_lease::RemovePodLabel");
}

// Candidates returns the live candidates of ns/lease, best first, as the
// JSON array of K8sLeaseCandidates.
inline std::string Candidates(const std::string& ns, const std::string& lease) {
  detail::Message m;
  char* json = nullptr;
  detail::check(K8sLeaseCandidates(detail::c(ns), detail::c(lease), &json, m.out()), m, "k8s_lease::Candidates");
  return detail::take(json);
}

// Shutdown cancels every election (releasing) and watch of the process,
// waiting up to timeout (> 0; K8sLeaseShutdown takes an int, so a timeout
// beyond INT_MAX ms, about 24.8 days, waits INT_MAX ms). Throws for a
// timeout not > 0, and as K8sLeaseShutdown fails.
inline void Shutdown(std::chrono::milliseconds timeout) {
  const long long ms = timeout.count();
  if (ms <= 0) throw Error("k8s_lease::Shutdown: invalid argument: timeoutMs: must be > 0, got " + std::to_string(ms));
  detail::Message m;
  detail::check(K8sLeaseShutdown(ms > INT_MAX ? INT_MAX : static_cast<int>(ms), m.out()), m, "k8s_lease::Shutdown");
}

// SetLogLevel: 0 errors, 1 warnings (the default), 2 info, 3 debug, 4..12
// client-go's verbosity too.
inline void SetLogLevel(int level) {
  detail::Message m;
  detail::check(K8sLeaseSetLogLevel(level, m.out()), m, "k8s_lease::SetLogLevel");
}

// A log sink: level (0 error, 1 warning, 2 info, 3+ debug) and the line.
using Logger = std::function<void(int level, const std::string& msg)>;

namespace detail {
inline std::mutex& logger_mu() {
  static std::mutex mu;
  return mu;
}
inline Logger*& logger() {
  static Logger* current = nullptr;
  return current;
}
inline void LogShim(void* ctx, int level, const char* msg, size_t size) noexcept {
  try {
    (*static_cast<Logger*>(ctx))(level, std::string(msg, size));
  } catch (...) {  // never into the library
  }
}
}  // namespace detail

// SetLogger sends the library's logs to sink (runs on one library thread,
// one line at a time); an empty sink restores standard error. Not from
// inside a sink: the replaced sink is freed once the library no longer
// calls it.
inline void SetLogger(Logger sink) {
  std::lock_guard<std::mutex> lock(detail::logger_mu());
  Logger* next = sink ? new Logger(std::move(sink)) : nullptr;
  detail::Message m;
  int rc = K8sLeaseSetLogger(next, next ? &detail::LogShim : nullptr, m.out());
  if (rc < 0) {
    delete next;
    detail::check(rc, m, "k8s_lease::SetLogger");
  }
  delete std::exchange(detail::logger(), next);
}

// Stats returns K8sLeaseStats' JSON; Metrics the Prometheus text of
// K8sLeaseMetrics, to append to a host's /metrics.
inline std::string Stats() {
  detail::Message m;
  char* json = nullptr;
  detail::check(K8sLeaseStats(&json, m.out()), m, "k8s_lease::Stats");
  return detail::take(json);
}

inline std::string Metrics() {
  detail::Message m;
  char* text = nullptr;
  detail::check(K8sLeaseMetrics(&text, m.out()), m, "k8s_lease::Metrics");
  return detail::take(text);
}

// Election is one candidacy and at most one term of leadership. Every
// method, and the destructor (which cancels it, releasing the lease if
// held), acts on this candidacy only: never on a later election on the same
// lease (say the one that replaced it, as in
// `e = std::make_unique<Election>(...)`). Not copyable or movable.
class Election {
 public:
  Election(std::string ns, std::string lease, std::string identity, const Timing& t = Timing{},
           const ElectionOptions& o = ElectionOptions{})
      : ns_(std::move(ns)), lease_(std::move(lease)), identity_(std::move(identity)) {
    detail::Message m;
    int rc = K8sLeaseRunElectionWith(detail::c(ns_), detail::c(lease_), detail::c(identity_), t.lease_duration.count(),
                                     t.renew_deadline.count(), t.retry_period.count(), detail::c(o.version), o.priority,
                                     o.policy, &id_, m.out());
    detail::check(rc, m, "k8s_lease::Election");
  }
  Election(const Election&) = delete;
  Election& operator=(const Election&) = delete;
  ~Election() { K8sLeaseCancelElectionId(detail::c(ns_), detail::c(lease_), id_, nullptr); }

  // The fencing token once elected; std::nullopt on timeout (the candidacy
  // is then cancelled: wait on a thread rather than poll), cancel or loss,
  // with the reason in *why. An election cancelled before the call (Cancel,
  // a HandOff, Shutdown) reads as no such election: std::nullopt too, why
  // "no election ...". Throws k8s_lease::Error, and the candidacy runs on,
  // for an invalid timeout: not > 0, or above kMaxTimeoutMs (about 292
  // years; std::chrono::milliseconds::max() is above it).
  std::optional<long long> WaitElected(std::chrono::milliseconds timeout, std::string* why = nullptr) {
    detail::Message m;
    long long token = 0;
    if (K8sLeaseWaitElectedMsId(detail::c(ns_), detail::c(lease_), id_, timeout.count(), &token, m.out()) != 0) {
      if (timeout.count() <= 0 || timeout.count() > detail::kMaxTimeoutMs) {
        detail::check(-1, m, "k8s_lease::Election::WaitElected");  // the library's message; throws
      }
      if (why) *why = m.str();
      return std::nullopt;
    }
    return token;
  }

  // Blocks until leadership (or the candidacy) ends: "" when cancelled,
  // else why it was lost.
  std::string WaitLost() {
    detail::Message m;
    return K8sLeaseWaitLostId(detail::c(ns_), detail::c(lease_), id_, m.out()) == 0 ? "" : m.str();
  }

  LeaderStatus IsLeader() const noexcept {
    LeaderStatus s;
    long long valid = 0;
    s.leader = K8sLeaseIsLeaderId(detail::c(ns_), detail::c(lease_), id_, &s.fencing_token, &valid, nullptr) == 1;
    s.valid_for = std::chrono::milliseconds(valid);
    return s;
  }

  // Cancel ends the election now (releasing a held lease); throws if the
  // release failed (the lease then simply expires).
  void Cancel() {
    detail::Message m;
    detail::check(K8sLeaseCancelElectionId(detail::c(ns_), detail::c(lease_), id_, m.out()), m, "k8s_lease::Cancel");
  }

  // HandOff ends this leadership and gives the lease to the candidate `to`;
  // returns once it leads, throws with the reason otherwise (see
  // K8sLeaseHandOffId). A refused hand-off (not the leader, an invalid
  // target or timeout, a target not seen campaigning) throws and keeps
  // leadership as it was; once the hand-off began, the election is over
  // whether the target took the lease or not (then it is released).
  void HandOff(const std::string& to, std::chrono::milliseconds timeout) {
    detail::Message m;
    detail::check(
        K8sLeaseHandOffId(detail::c(ns_), detail::c(lease_), id_, detail::c(to), timeout.count(), m.out()), m,
        "k8s_lease::HandOff");
  }

  // Candidates of this election's lease (k8s_lease::Candidates): the
  // targets HandOff may name.
  std::string Candidates() const { return k8s_lease::Candidates(ns_, lease_); }

  // PublishEndpoint routes the selector-less Service `service` to
  // address:port while this election leads (see K8sLeasePublishEndpoint);
  // call it before WaitElected. Throws on a bad argument.
  void PublishEndpoint(const std::string& service, const std::string& address, int port) {
    detail::Message m;
    detail::check(K8sLeasePublishEndpoint(detail::c(ns_), detail::c(lease_), id_, service.c_str(), address.c_str(), port,
                                          m.out()),
                  m, "k8s_lease::PublishEndpoint");
  }

  const std::string& ns() const { return ns_; }
  const std::string& lease() const { return lease_; }
  const std::string& identity() const { return identity_; }
  k8s_lease_election id() const { return id_; }

 private:
  std::string ns_, lease_, identity_;
  k8s_lease_election id_ = 0;
};

// HolderWatch calls back with the current holder, then on every change of
// (holder, token). The destructor stops this watch, and only it, and waits
// until its callback no longer runs (from any thread but the callback's
// own); destroying the watch from inside its own callback is not allowed
// (call Shutdown or keep it alive instead). Not copyable or movable.
class HolderWatch {
 public:
  using Callback = std::function<void(const std::optional<std::string>& holder, long long fencing_token)>;

  HolderWatch(std::string ns, std::string lease, Callback cb)
      : ns_(std::move(ns)), lease_(std::move(lease)), cb_(std::move(cb)) {
    detail::Message m;
    detail::check(
        K8sLeaseWatchHolderId(detail::c(ns_), detail::c(lease_), this, &HolderWatch::Shim, &id_, m.out()), m,
        "k8s_lease::HolderWatch");
  }
  HolderWatch(const HolderWatch&) = delete;
  HolderWatch& operator=(const HolderWatch&) = delete;
  ~HolderWatch() { K8sLeaseCancelWatchId(detail::c(ns_), detail::c(lease_), id_, nullptr); }
  k8s_lease_holder_watch id() const { return id_; }

 private:
  static void Shim(void* ctx, const char* holder, size_t size, int64_t token) noexcept {
    auto* self = static_cast<HolderWatch*>(ctx);
    try {
      std::optional<std::string> h;
      if (holder) h.emplace(holder, size);
      self->cb_(h, token);
    } catch (const std::exception& e) {
      std::cerr << "k8s_lease: HolderWatch callback threw: " << e.what() << '\n';
    } catch (...) {
      std::cerr << "k8s_lease: HolderWatch callback threw a non-std exception\n";
    }
  }

  std::string ns_, lease_;
  Callback cb_;
  k8s_lease_holder_watch id_ = 0;
};

}  // namespace k8s_lease

#endif  // K8S_LEASE_HPP
