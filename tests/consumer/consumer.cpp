// Links the installed library through find_package or pkg-config, and
// checks that calls work: the version (the installed header's), and a
// refusal of bad input.
#include <cstdio>
#include <string>

#include "k8s_lease.hpp"

int main() {
  std::string version = k8s_lease::Version();
  if (version != K8S_LEASE_VERSION) {
    std::printf("consumer: the library is %s, the installed header %s\n", version.c_str(), K8S_LEASE_VERSION);
    return 1;
  }
  try {
    k8s_lease::Election bad("Not_A_Namespace", "lease", "me");
    std::printf("consumer: bad namespace accepted\n");
    return 1;
  } catch (const k8s_lease::Error& e) {
    if (std::string(e.what()).find("namespace") == std::string::npos) {
      std::printf("consumer: unexpected error: %s\n", e.what());
      return 1;
    }
  }
  std::printf("consumer: k8s_lease %s works\n", version.c_str());
  return 0;
}
