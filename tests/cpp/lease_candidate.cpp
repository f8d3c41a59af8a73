// A candidate process for the multi-process and fault suites: a C++ host
// that links the library, campaigns on one lease, gates its "work" on
// K8sLeaseIsLeader, and logs its history for internal/history's checker as
// lines "<CLOCK_MONOTONIC ns> <pid> <event> <token> [detail]":
//   elected  K8sLeaseWaitElected returned 0
//   on       first IsLeader = 1 of a term (time taken before the call)
//   off      last IsLeader = 1 of a term (time after that call returned;
//            detail: the time that call began)
//   lost     K8sLeaseWaitLost / WaitElected returned -1 (detail: reason)
//   released it stepped down on its own (work stopped, then CancelElection)
//   exit     it is about to exit 0
// A worker thread polls IsLeader every millisecond, as leader-only work would.
// SIGTERM (handler installed with SA_ONSTACK, as the library requires) makes
// it release the lease (or, with --handoff-to ID, hand it to that candidate
// with K8sLeaseHandOff) and exit 0.
//
// usage: lease_candidate --namespace NS --lease NAME --identity ID --log FILE
//          [--seconds N] [--timing LEASE_MS,RENEW_MS,RETRY_MS]
//          [--hold MIN_MS-MAX_MS | --hold forever]
//          [--pattern campaign | --pattern poll] [--pod NAME] [--handoff-to ID]
//          [--version V] [--priority N] [--policy FLAGS] [--shutdown no]
//          [--publish SERVICE=ADDRESS:PORT] [--log-level N]
//   --log-level sets K8sLeaseSetLogLevel's level before anything else
//   (9: client-go logs every request, its status and latency).
//   --shutdown no exits without K8sLeaseShutdown, as a host written against
//   the first API (which has no Shutdown) does: on SIGTERM, CancelElection,
//   then _exit at once.
//   --seconds 0 (default) runs until SIGTERM. --hold forever keeps the lease
//   until it is lost; otherwise each term is released after a random time.
//   --pattern poll drives the library as our first user's master does
//   (Mooncake's K8sLeaderCoordinator): read the holder with GetHolder; with
//   no holder, RunElection + WaitElected(10 s) and CancelElection on a
//   timeout; with one, poll GetHolder every 200 ms until (holder, token)
//   changes; as leader, block in WaitLost. It holds until the lease is lost
//   or SIGTERM. With --pod it clears the label k8s-lease.test/role on that
//   Pod before calling anything else (no K8sLeaseInit first, as the master
//   does), sets it to "leader" when elected and clears it on loss; a label
//   call that fails is reported on stderr as "label error: ...".
//   --publish routes the selector-less Service SERVICE to ADDRESS:PORT
//   (an IPv6 address in brackets: [fd00::1]:8080) while this process leads:
//   every candidacy calls K8sLeasePublishEndpoint for its election id right
//   after starting it, before K8sLeaseWaitElected, so "elected" is logged
//   only once WaitElected returned, i.e. after the first attempt to write
//   the endpoint.
#include <fcntl.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <thread>

#include "k8s_lease_compat.h"  // our first user's calls are earlier forms

namespace {

long long MonoNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

struct Options {
  std::string ns, lease, identity, log;
  long long seconds = 0;
  long long lease_ms = 2000, renew_ms = 1500, retry_ms = 400;
  long long hold_min_ms = 50, hold_max_ms = 300;
  bool hold_forever = false;
  bool poll = false;  // --pattern poll
  bool shutdown = true;  // --shutdown no: exit without K8sLeaseShutdown
  std::string handoff_to;  // --handoff-to: on SIGTERM, hand the lease to this candidate
  std::string version;     // --version: declared when campaigning
  int priority = 0;        // --priority
  int policy = 0;          // --policy: K8S_LEASE_POLICY_* flags
  std::string pod;
  // --publish SERVICE=ADDRESS:PORT (publish_service empty: none)
  std::string publish_service, publish_address;
  int publish_port = 0;
  int log_level = -1;  // --log-level (-1: the library's default)
};

int g_log_fd = -1;
std::mutex g_log_mu;

// One write(2) per line on an O_APPEND file: lines of several processes
// never interleave, and a SIGKILL cannot lose a line already logged.
void Log(long long at, const char* event, long long token, const std::string& detail = "") {
  std::string d = detail;
  for (char& c : d)
    if (c == '\n' || c == '\r') c = ' ';
  char buf[256];
  int n = snprintf(buf, sizeof buf, "%lld %d %s %lld", at, getpid(), event, token);
  std::string line(buf, n);
  if (!d.empty()) line += " " + d;
  line += "\n";
  std::lock_guard<std::mutex> lock(g_log_mu);
  if (write(g_log_fd, line.data(), line.size()) != (ssize_t)line.size()) perror("lease_candidate: log");
}

std::string TakeMessage(char* msg) {
  std::string s = msg ? msg : "";
  K8sLeaseFree(msg);
  return s;
}

// The leader-only work: polls IsLeader and logs where each term began and
// ended as seen through it. Disabled while the main thread steps down.
class Worker {
 public:
  explicit Worker(const Options& o) : o_(o), thread_([this] { Run(); }) {}
  ~Worker() {
    quit_ = true;
    thread_.join();
  }
  // Stops the work and waits until the worker has logged its last "off".
  void Pause() {
    acked_ = false;
    enabled_ = false;
    while (!acked_) usleep(200);
  }
  void Resume() { enabled_ = true; }
  long long token() const { return token_; }

 private:
  void Run() {
    bool on = false;
    long long last_begin = 0, last_end = 0;
    while (!quit_) {
      if (!enabled_) {
        if (on) Log(last_end, "off", token_, std::to_string(last_begin));
        on = false;
        acked_ = true;
        usleep(1000);
        continue;
      }
      long long fencing = 0;
      long long begin = MonoNs();
      int rc = K8sLeaseIsLeader(o_.ns.c_str(), o_.lease.c_str(), &fencing, nullptr, nullptr);
      long long end = MonoNs();
      if (rc == 1) {
        if (!on || fencing != token_) {
          if (on) Log(last_end, "off", token_, std::to_string(last_begin));
          token_ = fencing;
          Log(begin, "on", fencing);
        }
        on = true;
        last_begin = begin;
        last_end = end;
      } else if (on) {
        Log(last_end, "off", token_, std::to_string(last_begin));
        on = false;
      }
      usleep(1000);
    }
    if (on) Log(last_end, "off", token_, std::to_string(last_begin));
  }

  const Options& o_;
  std::atomic<bool> enabled_{true}, acked_{false}, quit_{false};
  std::atomic<long long> token_{0};
  std::thread thread_;
};

int g_stop_pipe[2];

void OnSigterm(int) {
  char c = 1;
  ssize_t r = write(g_stop_pipe[1], &c, 1);
  (void)r;
}

bool ParseRange(const char* s, long long* a, long long* b) { return sscanf(s, "%lld-%lld", a, b) == 2 && *a >= 0 && *b >= *a; }

// SERVICE=ADDRESS:PORT, or SERVICE=[IPV6]:PORT. The library checks the
// names and the address itself; this only splits them.
bool ParsePublish(const std::string& v, Options* o) {
  size_t eq = v.find('=');
  if (eq == std::string::npos || eq == 0) return false;
  std::string hostport = v.substr(eq + 1), port;
  if (!hostport.empty() && hostport[0] == '[') {
    size_t close = hostport.find(']');
    if (close == std::string::npos || close + 1 >= hostport.size() || hostport[close + 1] != ':') return false;
    o->publish_address = hostport.substr(1, close - 1);
    port = hostport.substr(close + 2);
  } else {
    size_t colon = hostport.find(':');
    if (colon == std::string::npos || hostport.find(':', colon + 1) != std::string::npos) return false;
    o->publish_address = hostport.substr(0, colon);
    port = hostport.substr(colon + 1);
  }
  char* end = nullptr;
  long n = port.empty() ? 0 : strtol(port.c_str(), &end, 10);
  if (port.empty() || *end != '\0' || n < 1 || n > 65535 || o->publish_address.empty()) return false;
  o->publish_service = v.substr(0, eq);
  o->publish_port = (int)n;
  return true;
}

bool ParseArgs(int argc, char** argv, Options* o) {
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    const char* v = argv[i + 1];
    if (k == "--namespace") o->ns = v;
    else if (k == "--lease") o->lease = v;
    else if (k == "--identity") o->identity = v;
    else if (k == "--log") o->log = v;
    else if (k == "--handoff-to") o->handoff_to = v;
    else if (k == "--version") o->version = v;
    else if (k == "--priority") o->priority = atoi(v);
    else if (k == "--policy") o->policy = atoi(v);
    else if (k == "--seconds") o->seconds = atoll(v);
    else if (k == "--log-level") {
      char* end = nullptr;
      long n = strtol(v, &end, 10);
      if (*v == '\0' || *end != '\0' || n < 0) return false;
      o->log_level = (int)n;
    }
    else if (k == "--timing") {
      if (sscanf(v, "%lld,%lld,%lld", &o->lease_ms, &o->renew_ms, &o->retry_ms) != 3) return false;
    } else if (k == "--pattern") {
      if (std::string(v) == "poll") o->poll = true;
      else if (std::string(v) != "campaign") return false;
    } else if (k == "--pod") {
      o->pod = v;
    } else if (k == "--publish") {
      if (!ParsePublish(v, o)) return false;
    } else if (k == "--shutdown") {
      if (std::string(v) == "no") o->shutdown = false;
      else if (std::string(v) != "yes") return false;
    } else if (k == "--hold") {
      if (std::string(v) == "forever") o->hold_forever = true;
      else if (!ParseRange(v, &o->hold_min_ms, &o->hold_max_ms)) return false;
    } else return false;
  }
  return argc % 2 == 1 && !o->ns.empty() && !o->lease.empty() && !o->identity.empty() && !o->log.empty();
}

class Candidate {
 public:
  explicit Candidate(const Options& o) : o_(o), rng_(getpid()) {}

  int Run() {
    char* err = nullptr;
    if (o_.log_level >= 0 && K8sLeaseSetLogLevel(o_.log_level, &err) != 0) return Fail("log level", err);
    if (o_.poll) SetLabel(false);  // before any Init, as the master does
    if (K8sLeaseInit(&err) != 0) return Fail("init", err);
    Worker worker(o_);
    worker_ = &worker;
    std::thread stopper([this] { StopOnSignal(); });
    long long end = o_.seconds > 0 ? MonoNs() + o_.seconds * 1000000000LL : 0;
    int rc = o_.poll ? RunPoll() : RunCampaigns(end);
    Stop();  // also wakes the stopper thread
    stopper.join();
    worker_ = nullptr;
    if (o_.shutdown && K8sLeaseShutdown(5000, &err) != 0) return Fail("shutdown", err);
    Log(MonoNs(), "exit", 0);
    return rc;
  }

 private:
  // The default pattern: one campaign after another, each held for a while.
  int RunCampaigns(long long end) {
    char* err = nullptr;
    int rc = 0;
    while (!stopping_ && (end == 0 || MonoNs() < end)) {
      if (Run(&err) != 0) {
        rc = Fail("run", err);
        break;
      }
      if (!Term(end)) break;
    }
    return rc;
  }

  // (holder, token) as the master's ReadCurrentView sees it.
  struct View {
    bool ok = false;
    std::string holder;  // "" when there is no leader
    long long token = 0;
    bool operator!=(const View& o) const { return holder != o.holder || token != o.token; }
  };

  View ReadView() {
    View v;
    char* holder = nullptr;
    char* err = nullptr;
    int rc = K8sLeaseGetHolder(Ns(), Lease(), &holder, &v.token, &err);
    if (rc < 0) {
      fprintf(stderr, "lease_candidate %d: get holder: %s\n", getpid(), TakeMessage(err).c_str());
      return v;
    }
    v.ok = true;
    v.holder = holder ? holder : "";
    K8sLeaseFree(holder);
    return v;
  }

  // The master's WaitForViewChange: GetHolder every 200 ms until the view
  // differs from known (or the process stops).
  void WaitForViewChange(const View& known) {
    while (!stopping_) {
      usleep(200000);
      View v = ReadView();
      if (v.ok && v != known) return;
    }
  }

  // Our first user's loop (see the usage above).
  int RunPoll() {
    char* err = nullptr;
    const int wait_elected_sec = 10;
    while (!stopping_) {
      View view = ReadView();
      if (!view.ok) {
        usleep(1000000);
        continue;
      }
      if (!view.holder.empty()) {
        WaitForViewChange(view);
        continue;
      }
      if (Run(&err) != 0) {
        Fail("run", err);
        usleep(1000000);
        continue;
      }
      long long token = 0;
      if (K8sLeaseWaitElected(Ns(), Lease(), wait_elected_sec, &token, &err) != 0) {
        TakeMessage(err);
        if (stopping_) break;
        if (K8sLeaseCancelElection(Ns(), Lease(), &err) != 0) Fail("cancel", err);
        View seen = ReadView();  // contended: wait for the view to change
        if (seen.ok) WaitForViewChange(seen);
        continue;
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (stopping_) break;
        Log(MonoNs(), "elected", token);
      }
      SetLabel(true);
      if (!AwaitLoss(token)) break;  // cancelled by the stopper
      SetLabel(false);
    }
    return 0;
  }

  // The leader label on --pod: set when elected, cleared otherwise.
  void SetLabel(bool leader) {
    if (o_.pod.empty()) return;
    char* err = nullptr;
    const char* key = "k8s-lease.test/role";
    int rc = leader ? K8sPatchPodLabel(Ns(), o_.pod.c_str(), key, "leader", &err)
                    : K8sRemovePodLabel(Ns(), o_.pod.c_str(), key, &err);
    if (rc != 0) fprintf(stderr, "lease_candidate %d: label error: %s\n", getpid(), TakeMessage(err).c_str());
  }

  const char* Ns() { return o_.ns.c_str(); }

  // Starts a candidacy, with the version, priority and policy given, and
  // its endpoint (--publish) before anyone waits for it to be elected. A
  // candidacy whose endpoint is refused is cancelled: the run fails.
  int Run(char** err) {
    long long id = 0;
    if (K8sLeaseRunElectionWith(Ns(), Lease(), o_.identity.c_str(), o_.lease_ms, o_.renew_ms, o_.retry_ms,
                                o_.version.empty() ? nullptr : o_.version.c_str(), o_.priority, o_.policy, &id, err) != 0) {
      return -1;
    }
    if (o_.publish_service.empty() ||
        K8sLeasePublishEndpoint(Ns(), Lease(), id, o_.publish_service.c_str(), o_.publish_address.c_str(), o_.publish_port,
                                err) == 0) {
      return 0;
    }
    K8sLeaseCancelElectionId(Ns(), Lease(), id, nullptr);
    return -1;
  }
  const char* Lease() { return o_.lease.c_str(); }

  // One candidacy: waits to lead, leads, and steps down or loses. Returns
  // false when the process is stopping.
  bool Term(long long end) {
    char* err = nullptr;
    long long token = 0;
    if (K8sLeaseWaitElected(Ns(), Lease(), 3600, &token, &err) != 0) {
      std::string why = TakeMessage(err);
      if (stopping_) return false;
      Log(MonoNs(), "lost", 0, why);
      usleep(100000);
      return true;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return false;
      Log(MonoNs(), "elected", token);
    }
    if (o_.hold_forever) return AwaitLoss(token);
    long long hold_until = MonoNs() + (o_.hold_min_ms + (long long)(rng_() % (o_.hold_max_ms - o_.hold_min_ms + 1))) * 1000000LL;
    while (MonoNs() < hold_until && (end == 0 || MonoNs() < end) && !stopping_ &&
           K8sLeaseIsLeader(Ns(), Lease(), nullptr, nullptr, nullptr) == 1) {
      usleep(2000);
    }
    if (stopping_) return false;
    if (K8sLeaseIsLeader(Ns(), Lease(), nullptr, nullptr, nullptr) != 1) return AwaitLoss(token);
    StepDown(token);
    usleep((rng_() % 100) * 1000);  // let another candidate win sometimes
    return true;
  }

  // Waits for the end of a term the process did not end itself.
  bool AwaitLoss(long long token) {
    char* err = nullptr;
    int rc = K8sLeaseWaitLost(Ns(), Lease(), &err);
    std::string why = TakeMessage(err);
    if (rc == 0) return false;  // cancelled: the stopper stepped down
    Log(MonoNs(), "lost", token, why);
    return true;
  }

  // Work stops first, then the lease is released: the logged end is never
  // before the last IsLeader = 1 the work acted on.
  void StepDown(long long token) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      worker_->Pause();
      Log(MonoNs(), "released", token);
    }
    char* err = nullptr;
    if (K8sLeaseCancelElection(Ns(), Lease(), &err) != 0) Fail("cancel", err);
    worker_->Resume();
  }

  void Stop() {
    char c = 0;
    ssize_t r = write(g_stop_pipe[1], &c, 1);
    (void)r;
  }

  // SIGTERM (or the end of the run): stop working, release, wake the main
  // thread out of WaitElected / WaitLost.
  void StopOnSignal() {
    char c;
    while (read(g_stop_pipe[0], &c, 1) < 0) {
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
      worker_->Pause();
      Log(MonoNs(), "released", worker_->token());
    }
    char* err = nullptr;
    if (!o_.handoff_to.empty() && K8sLeaseIsLeader(Ns(), Lease(), nullptr, nullptr, nullptr) == 1) {
      long long start = MonoNs();
      if (K8sLeaseHandOff(Ns(), Lease(), o_.handoff_to.c_str(), 5000, &err) != 0) {
        // Refused (the target is not campaigning: leadership is kept) or
        // failed: release as usual.
        Fail("hand off", err);
        err = nullptr;
        if (K8sLeaseCancelElection(Ns(), Lease(), &err) != 0) Fail("cancel", err);
      } else {
        fprintf(stderr, "lease_candidate %d: handed off to %s in %.3f ms\n", getpid(), o_.handoff_to.c_str(),
                (MonoNs() - start) / 1e6);
      }
      return;
    }
    if (K8sLeaseCancelElection(Ns(), Lease(), &err) != 0) Fail("cancel", err);
    if (!o_.shutdown) {
      // Exit the moment CancelElection returns: nothing of the library's
      // that is still queued survives this.
      Log(MonoNs(), "exit", 0);
      _exit(0);
    }
  }

  int Fail(const char* what, char* msg) {
    fprintf(stderr, "lease_candidate %d: %s: %s\n", getpid(), what, msg ? msg : "");
    K8sLeaseFree(msg);
    return 1;
  }

  const Options& o_;
  std::mt19937 rng_;
  std::mutex mu_;
  std::atomic<bool> stopping_{false};
  Worker* worker_ = nullptr;
};

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!ParseArgs(argc, argv, &o)) {
    fprintf(stderr,
            "usage: %s --namespace NS --lease NAME --identity ID --log FILE [--seconds N]"
            " [--timing LEASE_MS,RENEW_MS,RETRY_MS] [--hold MIN_MS-MAX_MS|forever]"
            " [--pattern campaign|poll] [--pod NAME] [--publish SERVICE=ADDRESS:PORT] [--log-level N]\n",
            argv[0]);
    return 2;
  }
  g_log_fd = open(o.log.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (g_log_fd < 0 || pipe(g_stop_pipe) != 0) {
    perror("lease_candidate");
    return 2;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = OnSigterm;
  sa.sa_flags = SA_ONSTACK | SA_RESTART;
  sigaction(SIGTERM, &sa, nullptr);
  return Candidate(o).Run();
}
