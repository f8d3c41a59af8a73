#ifndef K8S_LEASE_LOADERSTRESS_H
#define K8S_LEASE_LOADERSTRESS_H
int k8s_lease_dlopen_cycles(const char* path, int cycles);
void k8s_lease_scan_opening_inside_callback(void);
#endif
