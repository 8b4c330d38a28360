// Two "nodes" for tests: two network namespaces joined by a veth pair, at <subnet>.1 and
// <subnet>.2 (addresses that exist only inside the test's own namespaces), loopback up in both.
// Needs root and iproute2 (`ip netns`); the namespaces are named after the test process and a
// tag, and removed by the destructor, also when the test fails. No torch.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace cohort::testing {

/// iproute2's `ip`: its path, else "" (the network-namespace tests skip).
inline std::string find_ip_tool() {
  for (const char* p : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"})
    if (access(p, X_OK) == 0) return p;
  return "";
}

class NamespacePair {
 public:
  /// `ip`: find_ip_tool()'s path; `tag`: a few letters that tell tests' namespaces apart;
  /// `subnet`: the first three octets, e.g. "10.77.0".
  NamespacePair(const std::string& ip, const std::string& tag, const std::string& subnet) : ip_(ip) {
    const std::string id = std::to_string(getpid());
    a_ = "cohort_" + tag + "a" + id;
    b_ = "cohort_" + tag + "b" + id;
    const std::string va = "cv" + tag + "a" + id, vb = "cv" + tag + "b" + id;  // at most 15 characters
    ok_ = sh(ip_ + " netns add " + a_) && sh(ip_ + " netns add " + b_) &&
          sh(ip_ + " link add " + va + " type veth peer name " + vb) && sh(ip_ + " link set " + va + " netns " + a_) &&
          sh(ip_ + " link set " + vb + " netns " + b_) && sh(ip_ + " -n " + a_ + " addr add " + subnet + ".1/24 dev " + va) &&
          sh(ip_ + " -n " + b_ + " addr add " + subnet + ".2/24 dev " + vb) &&
          sh(ip_ + " -n " + a_ + " link set " + va + " up") && sh(ip_ + " -n " + b_ + " link set " + vb + " up") &&
          sh(ip_ + " -n " + a_ + " link set lo up") && sh(ip_ + " -n " + b_ + " link set lo up");
    if (!ok_) sh(ip_ + " link del " + va);  // in case it was created but not moved
  }
  ~NamespacePair() {
    sh(ip_ + " netns del " + a_);  // deleting a namespace deletes the veth end inside it
    sh(ip_ + " netns del " + b_);
  }
  NamespacePair(const NamespacePair&) = delete;
  NamespacePair& operator=(const NamespacePair&) = delete;

  bool ok() const { return ok_; }
  /// `cmd` run inside namespace A (node 0's) or B.
  std::vector<std::string> exec_in(bool in_a, std::vector<std::string> cmd) const {
    cmd.insert(cmd.begin(), {ip_, "netns", "exec", in_a ? a_ : b_});
    return cmd;
  }
  /// The same as one shell command line ("ip netns exec NS " + command).
  std::string shell_in(bool in_a, const std::string& command) const {
    return ip_ + " netns exec " + (in_a ? a_ : b_) + " " + command;
  }

 private:
  static bool sh(const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()) == 0; }
  std::string ip_, a_, b_;
  bool ok_ = false;
};

}  // namespace cohort::testing
