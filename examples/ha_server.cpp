// ha_server: a replica of a highly available server, like our first user's
// metadata master. Every replica campaigns for one Lease; the leader labels
// its Pod (so a Service selects it) and serves, gating each unit of work on
// IsLeader; on loss it stops serving, removes the label and campaigns again.
// Standbys follow the holder with a watch. SIGTERM steps down gracefully
// (the lease is released, so a standby takes over at once).
//
// Leader-only routing without the label: with LEADER_SERVICE set (a
// selector-less Service with one unnamed port, deploy/service.yaml), every
// candidacy publishes POD_IP:SERVICE_PORT (default 7000, the port it serves
// on) as that Service's one endpoint before it waits to be elected, so the
// Service routes to this replica by the time WaitElected returns, and to
// nobody else; the library withdraws it when the replica steps down.
//
// usage: ha_server NAMESPACE LEASE IDENTITY POD [LEASE_S RENEW_MS RETRY_MS]
//   env (all optional): LEASE_DURATION_MS, RENEW_DEADLINE_MS, RETRY_PERIOD_MS
//   (the timings, instead of the last three arguments; client-go's 15 s /
//   10 s / 2 s without either), LEADER_SERVICE, POD_IP, SERVICE_PORT, and
//   HEALTH_PORT: serve plain HTTP there for the kubelet and Prometheus:
//     /readyz   200 once this replica's candidacy is registered (it
//               campaigns or leads), else 503: never "I am leader", so a
//               rolling update waits for a standby that can take over
//     /livez    200 while the library answers a cheap call (K8sLeaseStats)
//     /metrics  the library's metrics (K8sLeaseMetrics), Prometheus text
//
// Each event is one line on stdout, for people and for the demo driver:
//   <CLOCK_MONOTONIC ms> <identity> <event> [key=value ...]
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "k8s_lease.hpp"

namespace {

constexpr const char* kLeaderLabel = "k8s-lease.io/leader";

std::atomic<bool> g_stop{false};
std::atomic<bool> g_serving{false};
std::atomic<bool> g_candidate{false};  // a candidacy is registered (readiness)
std::string g_identity;
std::mutex g_out;

long long MonoMs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void Event(const std::string& event, const std::string& detail = "") {
  std::lock_guard<std::mutex> lock(g_out);
  printf("%lld %s %s%s%s\n", MonoMs(), g_identity.c_str(), event.c_str(), detail.empty() ? "" : " ", detail.c_str());
  fflush(stdout);
}

void OnTerm(int) { g_stop = true; }

// SA_ONSTACK: the Go runtime may run this on a goroutine's thread, whose
// stack is too small for a handler.
void InstallSigterm() {
  struct sigaction sa {};
  sa.sa_handler = OnTerm;
  sa.sa_flags = SA_ONSTACK | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
}

void Label(const std::string& ns, const std::string& pod, bool on) {
  try {
    if (on) {
      k8s_lease::PatchPodLabel(ns, pod, kLeaderLabel, "true");
    } else {
      k8s_lease::RemovePodLabel(ns, pod, kLeaderLabel);
    }
  } catch (const k8s_lease::Error& e) {
    Event("label-error", e.what());  // serving does not depend on the label
  }
}

// Serve while leadership is guaranteed; returns false when asked to stop.
bool Serve(const k8s_lease::Election& election) {
  for (;;) {
    if (g_stop) return false;
    auto status = election.IsLeader();
    if (!status) return !g_stop;  // lost, unless SIGTERM's cancel got here first
    // One unit of leader-only work would go here, carrying status.fencing_token.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// The endpoint to publish while leading, from the environment: none
// without LEADER_SERVICE.
struct Route {
  std::string service, address;
  int port = 7000;
};

std::optional<Route> RouteFromEnv() {
  const char* service = getenv("LEADER_SERVICE");
  if (!service || !*service) return std::nullopt;
  Route r;
  r.service = service;
  const char* ip = getenv("POD_IP");
  r.address = ip ? ip : "";  // the library refuses an empty or malformed one
  if (const char* port = getenv("SERVICE_PORT")) r.port = atoi(port);
  return r;
}

// Answers one HTTP request on fd: the first line's path picks the answer.
void Answer(int fd) {
  char buf[1024];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  if (n <= 0) return;
  buf[n] = 0;
  std::string line(buf), path;
  if (line.rfind("GET ", 0) == 0) path = line.substr(4, line.find(' ', 4) - 4);
  int code = 200;
  std::string type = "text/plain; charset=utf-8", body;
  if (path == "/readyz") {
    if (g_candidate) {
      body = "ok\n";
    } else {
      code = 503, body = "no candidacy registered\n";
    }
  } else if (path == "/livez") {
    try {
      k8s_lease::Stats();
      body = "ok\n";
    } catch (const k8s_lease::Error& e) {
      code = 500, body = std::string(e.what()) + "\n";
    }
  } else if (path == "/metrics") {
    try {
      body = k8s_lease::Metrics();
      type = "text/plain; version=0.0.4; charset=utf-8";
    } catch (const k8s_lease::Error& e) {
      code = 500, body = std::string(e.what()) + "\n";
    }
  } else {
    code = 404, body = "not found\n";
  }
  const char* reason = code == 200 ? "OK" : code == 503 ? "Service Unavailable" : code == 404 ? "Not Found" : "Internal Server Error";
  std::string head = "HTTP/1.0 " + std::to_string(code) + " " + reason + "\r\nContent-Type: " + type +
                     "\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n";
  std::string out = head + body;
  for (size_t off = 0; off < out.size();) {
    ssize_t w = write(fd, out.data() + off, out.size() - off);
    if (w <= 0) return;
    off += (size_t)w;
  }
}

// Serves /readyz, /livez and /metrics on port, one request per
// connection, on a thread of its own until the process exits; a port that
// cannot be bound is an error at start.
void ServeHealth(int port) {
  int lfd = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons((uint16_t)port);
  if (lfd < 0 || bind(lfd, (sockaddr*)&addr, sizeof addr) != 0 || listen(lfd, 16) != 0) {
    Event("error", "HEALTH_PORT " + std::to_string(port) + ": cannot listen");
    exit(1);
  }
  std::thread([lfd] {
    for (;;) {
      int fd = accept(lfd, nullptr, nullptr);
      if (fd < 0) continue;
      timeval tv{5, 0};  // a client that sends nothing does not hold the thread
      setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
      Answer(fd);
      close(fd);
    }
  }).detach();
}

// MsFromEnv is the positive whole number in the environment variable
// name, or fallback when it is unset; anything else stops the server.
long long MsFromEnv(const char* name, long long fallback) {
  const char* v = getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  long long n = strtoll(v, &end, 10);
  if (*end != 0 || n <= 0) {
    fprintf(stderr, "%s=%s: want a positive whole number\n", name, v);
    exit(2);
  }
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5 && argc != 8) {
    fprintf(stderr, "usage: %s NAMESPACE LEASE IDENTITY POD [LEASE_S RENEW_MS RETRY_MS]\n", argv[0]);
    return 2;
  }
  const std::string ns = argv[1], lease = argv[2], pod = argv[4];
  g_identity = argv[3];
  k8s_lease::Timing timing;  // client-go's 15 s / 10 s / 2 s unless given
  if (argc == 8) {
    timing.lease_duration = std::chrono::seconds(atoll(argv[5]));
    timing.renew_deadline = std::chrono::milliseconds(atoll(argv[6]));
    timing.retry_period = std::chrono::milliseconds(atoll(argv[7]));
  } else {
    timing.lease_duration = std::chrono::milliseconds(MsFromEnv("LEASE_DURATION_MS", timing.lease_duration.count()));
    timing.renew_deadline = std::chrono::milliseconds(MsFromEnv("RENEW_DEADLINE_MS", timing.renew_deadline.count()));
    timing.retry_period = std::chrono::milliseconds(MsFromEnv("RETRY_PERIOD_MS", timing.retry_period.count()));
  }
  if (const char* port = getenv("HEALTH_PORT"); port && *port) ServeHealth((int)MsFromEnv("HEALTH_PORT", 0));
  const std::optional<Route> route = RouteFromEnv();
  InstallSigterm();
  try {
    k8s_lease::Init();
    k8s_lease::HolderWatch watch(ns, lease, [](const std::optional<std::string>& holder, long long token) {
      Event("holder", "holder=" + holder.value_or("<none>") + " token=" + std::to_string(token));
    });
    // A signal handler may not call the library: this thread turns SIGTERM
    // into a cancel of every election, which wakes a blocked WaitElected.
    std::thread stopper([] {
      while (!g_stop) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      if (g_serving) return;  // the serving loop steps down itself, label first
      try {
        k8s_lease::Shutdown(std::chrono::milliseconds(5000));
      } catch (const k8s_lease::Error& e) {
        Event("shutdown-error", e.what());
      }
    });
    Event("started", "version=" + k8s_lease::Version());
    Label(ns, pod, false);  // a label left by a crashed predecessor in this Pod
    while (!g_stop) {
      k8s_lease::Election election(ns, lease, g_identity, timing);
      g_candidate = true;
      // Before WaitElected: it then returns only after the first write of
      // the endpoint (a bad argument throws, and the server exits).
      if (route) election.PublishEndpoint(route->service, route->address, route->port);
      Event("campaigning", route ? "service=" + route->service + " address=" + route->address + " port=" + std::to_string(route->port)
                                 : "");
      std::string why;
      std::optional<long long> token = election.WaitElected(std::chrono::hours(24 * 365), &why);
      if (!token) continue;  // cancelled by SIGTERM, or lost at once: campaign again
      Event("elected", "token=" + std::to_string(*token));
      g_serving = true;
      Label(ns, pod, true);
      bool lost = Serve(election);
      g_serving = false;
      if (!lost) {
        Label(ns, pod, false);
        election.Cancel();  // local leadership ends, then the release is written
        Event("released", "token=" + std::to_string(*token) + " reason=SIGTERM");
        break;
      }
      Event("lost", "token=" + std::to_string(*token) + " reason=\"" + election.WaitLost() + "\"");
      Label(ns, pod, false);
    }
    g_candidate = false;
    g_stop = true;
    stopper.join();
  } catch (const k8s_lease::Error& e) {
    Event("error", e.what());
    return 1;
  }
  Event("exit");
  return 0;
}
