/* The C side of package capi, for its own cgo code only: no host includes
 * it (hosts include include/k8s_lease.h). The typedefs are those of
 * include/k8s_lease.h; callbacks.c includes both headers, so a difference
 * between them fails every build of the package. */
#ifndef K8S_LEASE_CAPI_H
#define K8S_LEASE_CAPI_H

#include <stddef.h>
#include <stdint.h>

typedef void (*k8s_lease_holder_change_cb_t)(void* ctx, const char* holder, size_t holderSize, int64_t fencingToken);

typedef void (*k8s_lease_log_cb_t)(void* ctx, int level, const char* msg, size_t msgSize);

/* Go cannot call a C function pointer: these call cb(ctx, ...). */
void k8s_lease_call_holder_cb(k8s_lease_holder_change_cb_t cb, void* ctx, const char* holder, size_t size, int64_t token);
void k8s_lease_call_log_cb(k8s_lease_log_cb_t cb, void* ctx, int level, const char* msg, size_t size);

#endif
