// Program lookup on PATH with the checks execv() would fail on. See program_path.h.
#include "launcher/config/program_path.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <sstream>

#include "cohort/error.h"

namespace cohort::launcher {
namespace {

enum class Found { missing, directory, not_executable, ok };

Found check(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return Found::missing;
  if (S_ISDIR(st.st_mode)) return Found::directory;
  if (access(path.c_str(), X_OK) != 0) return Found::not_executable;
  return Found::ok;
}

}  // namespace

std::string resolve_program(const std::string& program) {
  if (program.empty()) throw ConfigError(-1, "no program given: usage is cohort run [options] [--] PROGRAM [ARGS...]");
  Found worst = Found::missing;
  std::string path = program;
  if (program.find('/') == std::string::npos) {
    const char* env_path = std::getenv("PATH");
    std::istringstream dirs(env_path ? env_path : "/usr/local/bin:/usr/bin:/bin");
    std::string dir;
    while (std::getline(dirs, dir, ':')) {
      std::string candidate = (dir.empty() ? "." : dir) + "/" + program;
      Found f = check(candidate);
      if (f == Found::ok) return candidate;
      if (f == Found::not_executable) worst = f, path = candidate;
    }
  } else {
    worst = check(program);
    if (worst == Found::ok) return program;
  }
  switch (worst) {
    case Found::directory:
      throw ConfigError(-1, "program '" + program + "' is a directory, not a program");
    case Found::not_executable:
      throw ConfigError(-1, "program '" + path + "' is not executable (chmod +x it, or run it through its interpreter)");
    default:
      throw ConfigError(-1, "program '" + program + "' not found" +
                                (program.find('/') == std::string::npos ? " on PATH" : ""));
  }
}

}  // namespace cohort::launcher
