#pragma once
// Running the real `sluice` binary (and mpirun) from end-to-end tests.
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <string>
#include <unistd.h>
#include <vector>

namespace sluice::test {

struct CommandResult {
  int exit_code;       // 128 + signal when killed
  std::string output;  // stdout and stderr together
};

inline CommandResult run_command(const std::string& command) {
  std::string output;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  char buffer[4096];
  while (size_t n = std::fread(buffer, 1, sizeof(buffer), pipe)) output.append(buffer, n);
  const int status = ::pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), output};
}

// The per-process folders scratch_dir made. support/scratch_cleanup.cpp, linked into every test
// executable, removes them when the test program passes and names them when it fails: a full
// ctest left ~3 GB of run directories and caches in /tmp, and CI machines can be short of disk.
struct ScratchRoots {
  std::mutex mutex;
  std::vector<std::filesystem::path> paths;
};
inline ScratchRoots& scratch_roots() {
  static ScratchRoots roots;
  return roots;
}

// A fresh, empty directory for one test, unique to this test process.
inline std::filesystem::path scratch_dir(const std::string& suite, const std::string& name) {
  const auto root = std::filesystem::temp_directory_path() / ("sluice-" + suite + "-" + std::to_string(::getpid()));
  {
    ScratchRoots& roots = scratch_roots();
    const std::lock_guard<std::mutex> lock(roots.mutex);
    if (std::find(roots.paths.begin(), roots.paths.end(), root) == roots.paths.end()) roots.paths.push_back(root);
  }
  const auto dir = root / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace sluice::test
