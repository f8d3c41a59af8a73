/* N elections as leader in one C process through the shared library, as a
 * C host runs them: the k8s-lease side of `make bench`'s scale rows.
 * Waits until all N lead (at most 120 s) and 30 s more (the one-time
 * writes of a new leadership, its Event and candidate record, settle),
 * then measures for WINDOW seconds
 * and prints one JSON line (the fields of lease-bench's scaleResult):
 * CPU (getrusage) and API requests (K8sLeaseMetrics) over the window, RSS
 * (/proc/self/status) at its end before the scrape that ends it and again
 * after it (at 1000 elections the text is 4.8 MB: client-go's side has no
 * scrape), goroutines (k8s_lease_goroutines), and how many elections ended
 * in it.
 * usage: scale_child NAMESPACE PREFIX N WINDOW_SECONDS (KUBECONFIG in the
 * environment) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "k8s_lease_compat.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static double cpu_s(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

static double rss_mb(void) {
  FILE* f = fopen("/proc/self/status", "r");
  char line[256];
  double kb = 0;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "VmRSS: %lf", &kb) == 1) break;
  if (f) fclose(f);
  return kb / 1024;
}

/* The sum of a metric family's samples (the family's name followed by a
 * space or '{' at the start of a line), or -1 without one. */
static double metric(const char* family) {
  char *text = NULL, *err = NULL;
  if (K8sLeaseMetrics(&text, &err) != 0) {
    fprintf(stderr, "scale_child: K8sLeaseMetrics: %s\n", err ? err : "?");
    K8sLeaseFree(err);
    return -1;
  }
  double sum = -1;
  size_t n = strlen(family);
  for (char* line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
    if (strncmp(line, family, n) != 0 || (line[n] != ' ' && line[n] != '{')) continue;
    const char* value = strrchr(line, ' ');
    sum = (sum < 0 ? 0 : sum) + atof(value + 1);
  }
  K8sLeaseFree(text);
  return sum;
}

int main(int argc, char** argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: %s NAMESPACE PREFIX N WINDOW_SECONDS\n", argv[0]);
    return 2;
  }
  const char *ns = argv[1], *prefix = argv[2];
  int n = atoi(argv[3]);
  double window = atof(argv[4]);
  char* err = NULL;
  if (n <= 0 || window <= 0) {
    fprintf(stderr, "scale_child: N and WINDOW_SECONDS must be positive\n");
    return 2;
  }
  if (K8sLeaseInit(&err) != 0) {
    fprintf(stderr, "scale_child: K8sLeaseInit: %s\n", err);
    K8sLeaseFree(err);
    return 1;
  }
  char name[256];
  for (int i = 0; i < n; i++) {
    snprintf(name, sizeof name, "%s-%d", prefix, i);
    if (K8sLeaseRunElection(ns, name, "scale", 15, 10, 2, &err) != 0) {
      fprintf(stderr, "scale_child: K8sLeaseRunElection %s: %s\n", name, err);
      K8sLeaseFree(err);
      return 1;
    }
  }
  /* Every election polled, as a host gating its work would. */
  int elected_all = 0;
  for (double deadline = now_s() + 120; now_s() < deadline; usleep(10000)) {
    int leading = 0;
    for (int i = 0; i < n; i++) {
      long long token = 0, valid = 0;
      snprintf(name, sizeof name, "%s-%d", prefix, i);
      leading += K8sLeaseIsLeader(ns, name, &token, &valid, NULL) == 1;
    }
    if (leading == n) {
      elected_all = 1;
      break;
    }
  }
  sleep(30);
  double requests = metric("k8s_lease_api_requests_total"), cpu = cpu_s(), start = now_s();
  sleep((unsigned)window);
  double elapsed = now_s() - start;
  /* Before the scrape, whose cost is not the elections'. */
  double cpu_percent = 100 * (cpu_s() - cpu) / elapsed;
  double rss = rss_mb();
  double requests_per_s = (metric("k8s_lease_api_requests_total") - requests) / elapsed;
  double rss_after_scrape = rss_mb();
  int goroutines = (int)metric("k8s_lease_goroutines");
  int losses = 0;
  for (int i = 0; i < n; i++) {
    long long token = 0, valid = 0;
    snprintf(name, sizeof name, "%s-%d", prefix, i);
    losses += elected_all && K8sLeaseIsLeader(ns, name, &token, &valid, NULL) != 1;
  }
  if (K8sLeaseShutdown(30000, &err) != 0) {
    fprintf(stderr, "scale_child: K8sLeaseShutdown: %s\n", err);
    K8sLeaseFree(err);
  }
  printf("{\"elections\":%d,\"elected_all\":%s,\"losses\":%d,\"rss_mb\":%.1f,\"rss_after_scrape_mb\":%.1f,"
         "\"goroutines\":%d,\"cpu_percent\":%.2f,\"requests_per_sec\":%.4f}\n",
         n, elected_all ? "true" : "false", losses, rss, rss_after_scrape, goroutines, cpu_percent, requests_per_s);
  return 0;
}
