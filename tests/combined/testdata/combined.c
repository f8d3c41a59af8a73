/* One process, one Go runtime: the library run.sh builds from
 * testdata/etcd_wrapper.go (the stand-in for our first user's etcd wrapper)
 * and embedded/k8s_lease_wrapper.go. Linked against it and compiled with
 * only its cgo-generated header (as our first user includes it): the other
 * file's exports and k8s-lease's work side by side, K8sLeaseInit does not
 * refuse (one runtime) but names the configuration sources it tried, and
 * the library does not define K8sLeaseStandalone. */
#define _GNU_SOURCE /* RTLD_DEFAULT */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libcombined.h"

static int failures;

static void check(int ok, const char* what, const char* detail) {
  printf("%s: %s%s%s\n", ok ? "ok" : "FAIL", what, detail ? ": " : "", detail ? detail : "");
  if (!ok) failures++;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s NONEXISTENT_KUBECONFIG\n", argv[0]);
    return 2;
  }
  const char* kubeconfig = argv[1];

  /* The other file's exports. */
  check(StandInPut("leader-key", "m1") == 0, "StandInPut (the other file's export)", NULL);
  StandInGetResult got = StandInGet("leader-key");
  check(got.found == 1 && got.value != NULL && strcmp(got.value, "m1") == 0, "StandInGet returns what StandInPut stored",
        got.value);
  free(got.value);

  /* k8s-lease's, from the same library and runtime. */
  const char* version = K8sLeaseVersion();
  check(version != NULL && version[0] != '\0', "K8sLeaseVersion", version);

  char* stats = NULL;
  char* err = NULL;
  int rc = K8sLeaseStats(&stats, &err);
  check(rc == 0 && stats != NULL && strstr(stats, "\"version\"") != NULL, "K8sLeaseStats", stats);
  K8sLeaseFree(stats);
  K8sLeaseFree(err);

  /* No cluster: K8sLeaseInit returns -1 naming the sources it tried, and is
   * not the refusal of a second Go runtime (there is one). */
  setenv("KUBECONFIG", kubeconfig, 1);
  unsetenv("KUBERNETES_SERVICE_HOST");
  unsetenv("KUBERNETES_SERVICE_PORT");
  err = NULL;
  rc = K8sLeaseInit(&err);
  printf("K8sLeaseInit = %d, errMsg: %s\n", rc, err ? err : "(null)");
  char want_kubeconfig[4096];
  snprintf(want_kubeconfig, sizeof want_kubeconfig, "kubeconfig ($KUBECONFIG=%s)", kubeconfig);
  check(rc == -1 && err != NULL, "K8sLeaseInit without a cluster returns -1 with a message", NULL);
  check(err != NULL && strstr(err, "another Go runtime") == NULL, "K8sLeaseInit does not refuse (one Go runtime)", NULL);
  check(err != NULL && strstr(err, "no Kubernetes configuration found") != NULL && strstr(err, "in-cluster: ") != NULL &&
            strstr(err, want_kubeconfig) != NULL,
        "its message names the sources tried (in-cluster, $KUBECONFIG)", NULL);
  K8sLeaseFree(err);

  /* The symbols, as a host sees them. */
  check(dlsym(RTLD_DEFAULT, "K8sLeaseStandalone") == NULL, "dlsym(RTLD_DEFAULT, \"K8sLeaseStandalone\") is NULL", NULL);
  check(dlsym(RTLD_DEFAULT, "K8sLeaseInit") != NULL, "dlsym(RTLD_DEFAULT, \"K8sLeaseInit\") is not NULL", NULL);
  check(dlsym(RTLD_DEFAULT, "StandInPut") != NULL, "dlsym(RTLD_DEFAULT, \"StandInPut\") is not NULL", NULL);
  check(dlsym(RTLD_DEFAULT, "k8s_lease_embedded_anchor") == NULL,
        "dlsym(RTLD_DEFAULT, \"k8s_lease_embedded_anchor\") is NULL (hidden)", NULL);

  if (failures) {
    fprintf(stderr, "combined: %d check(s) failed\n", failures);
    return 1;
  }
  return 0;
}
