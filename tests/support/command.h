#pragma once
// Running the real `sluice` binary (and mpirun) from end-to-end tests.
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <unistd.h>

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

// A fresh, empty directory for one test, unique to this test process.
inline std::filesystem::path scratch_dir(const std::string& suite, const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("sluice-" + suite + "-" + std::to_string(::getpid())) / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace sluice::test
