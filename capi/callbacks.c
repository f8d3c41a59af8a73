// The trampolines through which Go calls the host's callbacks. Hidden: they
// are not part of the ABI of whichever library embeds this package.
#include "capi.h"

// The public headers (k8s_lease_compat.h includes k8s_lease.h), for their
// typedefs: C11 accepts a typedef repeated with the same type and rejects
// one that differs, so capi.h cannot drift from the contract; and so every
// build of the package compiles them. (Nothing here may include
// _cgo_export.h too: its prototypes have char* where the public headers
// have const char*.)
#include "../include/k8s_lease_compat.h"

__attribute__((visibility("hidden"))) void k8s_lease_call_holder_cb(k8s_lease_holder_change_cb_t cb, void* ctx, const char* holder,
                                                                    size_t size, int64_t token) {
  cb(ctx, holder, size, token);
}

__attribute__((visibility("hidden"))) void k8s_lease_call_log_cb(k8s_lease_log_cb_t cb, void* ctx, int level, const char* msg,
                                                                 size_t size) {
  cb(ctx, level, msg, size);
}
