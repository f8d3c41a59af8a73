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
//   env: LEADER_SERVICE, POD_IP, SERVICE_PORT (all optional)
//
// Each event is one line on stdout, for people and for the demo driver:
//   <CLOCK_MONOTONIC ms> <identity> <event> [key=value ...]
#include <signal.h>
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
  }
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
    g_stop = true;
    stopper.join();
  } catch (const k8s_lease::Error& e) {
    Event("error", e.what());
    return 1;
  }
  Event("exit");
  return 0;
}
