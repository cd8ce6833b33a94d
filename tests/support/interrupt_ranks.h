#pragma once
// Faults made from outside the process for end-to-end tests: a signal (SIGSTOP, SIGKILL, SIGTERM)
// sent to chosen ranks of a running `sluice` job, as an operator, the OOM killer or a frozen
// node would. Needs SLUICE_BINARY (the test's compile definition) or the binary passed in.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

namespace sluice::test {

namespace fs = std::filesystem;

// Starts a long run, waits until its output shows `started` (it trains), sends `signal` from
// outside to the given ranks' processes (found by mpirun's OMPI_COMM_WORLD_RANK), and returns how long the job took to end after that, its exit status and its output.
// continue_after_s >= 0 (with SIGSTOP): SIGCONT follows that many seconds later, a rank frozen
// for a while (a swapping node, a debugger) rather than for good.
struct Interrupted {
  double seconds;
  int status;
  std::string output;
};

inline Interrupted interrupt_ranks(const std::string& command, const fs::path& run_dir, int signal,
                                   const std::vector<int>& ranks, const std::string& started = "step 5/",
                                   const std::string& binary = SLUICE_BINARY, double continue_after_s = -1) {
  const std::string log = (run_dir / "output.txt").string();
  const pid_t child = ::fork();
  if (child == 0) {
    ::setsid();  // its own process group, so that the test can stop everything it started
    const std::string redirected = command + " > " + log + " 2>&1";
    ::execl("/bin/sh", "sh", "-c", redirected.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  auto slurp = [](const std::string& path) {
    std::ifstream in(path);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::minutes(2);
  std::vector<pid_t> targets;
  while (targets.size() < ranks.size() && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    if (slurp(log).find(started) == std::string::npos) continue;
    targets.clear();
    for (const auto& entry : fs::directory_iterator("/proc")) {
      const std::string name = entry.path().filename().string();
      if (name.find_first_not_of("0123456789") != std::string::npos) continue;
      const std::string env = slurp((entry.path() / "environ").string());
      const std::string cmd = slurp((entry.path() / "cmdline").string());
      if (cmd.find(run_dir.string()) == std::string::npos || cmd.rfind(binary, 0) != 0) continue;
      for (int rank : ranks) {
        if (env.find("OMPI_COMM_WORLD_RANK=" + std::to_string(rank) + '\0') != std::string::npos) {
          targets.push_back(std::stoi(name));
        }
      }
    }
  }
  Interrupted result{-1, -1, ""};
  if (targets.size() == ranks.size()) {
    const auto sent = std::chrono::steady_clock::now();
    for (pid_t target : targets) ::kill(target, signal);
    if (continue_after_s >= 0) {
      std::this_thread::sleep_for(std::chrono::duration<double>(continue_after_s));
      for (pid_t target : targets) ::kill(target, SIGCONT);
    }
    while (::waitpid(child, &result.status, WNOHANG) == 0 &&
           std::chrono::steady_clock::now() - sent < std::chrono::seconds(60)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - sent).count();
    for (pid_t target : targets) ::kill(target, SIGKILL);
  }
  ::kill(-child, SIGKILL);  // whatever is left, including a stopped rank
  ::waitpid(child, &result.status, 0);
  result.output = slurp(log);
  return result;
}

}  // namespace sluice::test
