#ifndef K8S_LEASE_RUNTIMECHECK_H
#define K8S_LEASE_RUNTIMECHECK_H

// Returns the path (malloc'd; the caller frees it) of a loaded object other
// than the one holding this code that carries its own Go runtime, or NULL.
// *failed is set when it cannot tell: memory ran out, or the object
// holding this code could not be identified.
char* k8s_lease_other_go_runtime(int* failed);

#endif
