// Test helper: joins the job from the environment with cohort::init(), takes part in one
// allreduce, prints "rank R world W local L source S sum X" and exits 0; on a cohort error it
// prints the message to stderr and exits 2. INIT_PROBE_DEVICE=cuda: the allreduce is of a tensor
// on ctx->device(kCUDA), and the line ends with " device cuda:N". INIT_PROBE_LISTENERS=1: then
// one line "rank R listens on A:P ..." (or "... on nothing") with the local address of every TCP
// socket this process listens on, "rank R store S" (the store file and its directory's mode, or
// "tcp") and "rank R libtorch MAJOR.MINOR".
#include <cohort/cohort.h>
#include <dirent.h>
#include <sys/stat.h>
#include <torch/torch.h>
#include <torch/version.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <string>

namespace {

// Listening TCP sockets of this process, as "A:P": the inodes of its socket descriptors, looked
// up in /proc/net/tcp and tcp6 (state 0A is LISTEN).
std::string listeners() {
  std::set<std::string> inodes;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (dirent* e = readdir(d)) {
      char target[256] = {0};
      const std::string link = std::string("/proc/self/fd/") + e->d_name;
      if (readlink(link.c_str(), target, sizeof(target) - 1) > 0 && std::strncmp(target, "socket:[", 8) == 0)
        inodes.insert(std::string(target + 8, std::strlen(target) - 9));
    }
    closedir(d);
  }
  std::string out;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::string slot, local, remote, state, queues, timer, retr, uid, timeout, inode;
      f >> slot >> local >> remote >> state >> queues >> timer >> retr >> uid >> timeout >> inode;
      if (state != "0A" || !inodes.count(inode)) continue;
      const std::string hex_addr = local.substr(0, local.find(':'));
      const int port = std::stoi(local.substr(local.find(':') + 1), nullptr, 16);
      std::string addr;
      if (hex_addr.size() == 8) {  // IPv4, little-endian bytes
        const unsigned long v = std::stoul(hex_addr, nullptr, 16);
        addr = std::to_string(v & 0xff) + "." + std::to_string((v >> 8) & 0xff) + "." + std::to_string((v >> 16) & 0xff) +
               "." + std::to_string(v >> 24);
      } else {
        addr = hex_addr == "00000000000000000000000001000000"   ? "::1"
               : hex_addr == "00000000000000000000000000000000" ? "[::]"  // every interface
                                                                : "[" + hex_addr + "]";
      }
      out += " " + addr + ":" + std::to_string(port);
    }
  }
  return out.empty() ? " nothing" : out;
}

}  // namespace

int main() {
  try {
    auto ctx = cohort::init();
    const char* want = std::getenv("INIT_PROBE_DEVICE");
    const auto device = ctx->device(want && std::strcmp(want, "cuda") == 0 ? torch::kCUDA : torch::kCPU);
    std::vector<torch::Tensor> t{torch::ones({1}, device)};
    ctx->group(device)->allreduce(t)->wait();
    std::cout << "rank " << ctx->rank() << " world " << ctx->world_size() << " local " << ctx->local_rank()
              << " source " << ctx->env().source << " sum " << t[0].item<float>()
              << (device.is_cuda() ? " device " + device.str() : std::string()) << std::endl;
    if (const char* l = std::getenv("INIT_PROBE_LISTENERS"); l && std::strcmp(l, "1") == 0) {
      std::ostringstream report;
      const std::string& file = ctx->env().store_file;
      report << "rank " << ctx->rank() << " listens on" << listeners() << "\nrank " << ctx->rank() << " store "
             << (file.empty() ? std::string("tcp") : file);
      struct stat st {};
      if (!file.empty() && stat(file.substr(0, file.rfind('/')).c_str(), &st) == 0)
        report << " in a directory of mode " << std::oct << (st.st_mode & 0777) << std::dec;
      report << "\nrank " << ctx->rank() << " libtorch " << TORCH_VERSION_MAJOR << "." << TORCH_VERSION_MINOR << "\n";
      std::cout << report.str() << std::flush;  // one write: ranks share the pipe
    }
    ctx->barrier();
    return 0;
  } catch (const cohort::Error& e) {
    std::cerr << std::string(e.what()) + "\n" << std::flush;  // one write: ranks share the pipe
    return 2;
  }
}
