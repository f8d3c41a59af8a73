// Finds a second Go runtime in the process. Every Go c-shared library
// exports its own _cgo_wait_runtime_init_done; a loaded object other than
// the one holding this code that defines one is another Go runtime.
//
// dl_iterate_phdr runs its callback with glibc's loader lock held, so the
// callback only copies the objects' names and base addresses; dlopen,
// dlsym and dladdr run after it has returned. (Calling them inside could
// deadlock against a host thread's dlopen, e.g. of an NSS module.)
#include <dlfcn.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>

#include "runtimecheck.h"

struct loaded_objects {
  char** names;
  uintptr_t* bases;
  size_t n, cap;
  int failed;
};

static int collect(struct dl_phdr_info* info, size_t size, void* data) {
  struct loaded_objects* objs = (struct loaded_objects*)data;
  (void)size;
  if (info->dlpi_name == NULL || info->dlpi_name[0] == 0) return 0;
  if (objs->n == objs->cap) {
    size_t cap = objs->cap ? 2 * objs->cap : 32;
    char** names = (char**)realloc(objs->names, cap * sizeof(char*));
    if (names == NULL) return objs->failed = 1;
    objs->names = names;
    uintptr_t* bases = (uintptr_t*)realloc(objs->bases, cap * sizeof(uintptr_t));
    if (bases == NULL) return objs->failed = 1;
    objs->bases = bases;
    objs->cap = cap;
  }
  char* name = strdup(info->dlpi_name);
  if (name == NULL) return objs->failed = 1;
  objs->names[objs->n] = name;
  objs->bases[objs->n] = (uintptr_t)info->dlpi_addr;
  objs->n++;
  return 0;
}

// load_bias sets *bias to the load bias of the object that holds addr.
static int load_bias(void* addr, uintptr_t* bias) {
  Dl_info info;
  struct link_map* map = NULL;
  if (dladdr1(addr, &info, (void**)&map, RTLD_DL_LINKMAP) == 0 || map == NULL) return -1;
  *bias = (uintptr_t)map->l_addr;
  return 0;
}

__attribute__((visibility("hidden"))) char* k8s_lease_other_go_runtime(int* failed) {
  struct loaded_objects objs = {NULL, NULL, 0, 0, 0};
  char* other = NULL;
  // The object holding this code, told by its load bias (the link map's
  // l_addr, which is what dl_iterate_phdr reports as dlpi_addr): a shared
  // library (ours), or the main program (then no named object is ours).
  uintptr_t self;
  if (load_bias((void*)&k8s_lease_other_go_runtime, &self) != 0) {
    *failed = 1;
    return NULL;
  }
  dl_iterate_phdr(collect, &objs);
  *failed = objs.failed;
  for (size_t i = 0; i < objs.n && other == NULL && !objs.failed; i++) {
    if (objs.bases[i] == self) continue;  // ours
    void* h = dlopen(objs.names[i], RTLD_LAZY | RTLD_NOLOAD);
    if (h == NULL) continue;
    void* sym = dlsym(h, "_cgo_wait_runtime_init_done");
    uintptr_t defined_in;
    // Defined by this object itself, not merely resolved through it.
    if (sym != NULL && load_bias(sym, &defined_in) == 0 && defined_in == objs.bases[i]) {
      other = objs.names[i];
      objs.names[i] = NULL;
    }
    dlclose(h);
  }
  for (size_t i = 0; i < objs.n; i++) free(objs.names[i]);
  free(objs.names);
  free(objs.bases);
  return other;
}
