// Test support for runtimecheck: load and unload a shared object in a
// loop (as a host thread resolving names loads NSS modules), and the
// pre-fix way of looking for a second Go runtime, which called dlopen
// inside dl_iterate_phdr's callback, kept to show why that was wrong.
#include <dlfcn.h>
#include <link.h>
#include <stddef.h>

#include "loaderstress.h"

int k8s_lease_dlopen_cycles(const char* path, int cycles) {
  for (int i = 0; i < cycles; i++) {
    void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) return -1;
    dlclose(h);
  }
  return 0;
}

static int open_inside_callback(struct dl_phdr_info* info, size_t size, void* data) {
  (void)size;
  (void)data;
  if (info->dlpi_name == NULL || info->dlpi_name[0] == 0) return 0;
  void* h = dlopen(info->dlpi_name, RTLD_LAZY | RTLD_NOLOAD);
  if (h != NULL) dlclose(h);
  return 0;
}

void k8s_lease_scan_opening_inside_callback(void) { dl_iterate_phdr(open_inside_callback, NULL); }
