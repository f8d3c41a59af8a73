/* What loading the shared library costs a host: dlopen (the Go runtime
 * starts, every package's init runs) and K8sLeaseInit (configuration
 * loaded, client built; no API call), in milliseconds, and the RSS after.
 * Prints "dlopen_ms X", "init_ms Y", "rss_mb Z".
 * usage: load_time LIBRARY (KUBECONFIG in the environment) */
#include <dlfcn.h>
#include <stdio.h>
#include <time.h>

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s LIBRARY\n", argv[0]);
    return 2;
  }
  double t0 = now_ms();
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    fprintf(stderr, "load_time: dlopen: %s\n", dlerror());
    return 1;
  }
  double t1 = now_ms();
  int (*init)(char**) = (int (*)(char**))dlsym(lib, "K8sLeaseInit");
  if (!init) {
    fprintf(stderr, "load_time: no K8sLeaseInit in %s\n", argv[1]);
    return 1;
  }
  char* err = NULL;
  if (init(&err) != 0) {
    fprintf(stderr, "load_time: K8sLeaseInit: %s\n", err ? err : "?");
    return 1;
  }
  double t2 = now_ms();
  double kb = 0;
  char line[256];
  FILE* f = fopen("/proc/self/status", "r");
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "VmRSS: %lf", &kb) == 1) break;
  if (f) fclose(f);
  printf("dlopen_ms %.2f\ninit_ms %.2f\nrss_mb %.1f\n", t1 - t0, t2 - t1, kb / 1024);
  return 0;
}
