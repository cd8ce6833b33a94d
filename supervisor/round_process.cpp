#include "supervisor/round_process.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>

namespace sluice::supervisor {
namespace {

std::atomic<pid_t> child_pid{0};
std::atomic<int> stop_signal{0};

void pass_on(int signal) {
  stop_signal.store(signal);
  const pid_t child = child_pid.load();
  if (child > 0) ::kill(child, signal);
}

// A stream of the child: its pipe, the bytes of a line not yet ended, where lines go on to.
struct Stream {
  int fd = -1;
  FILE* out = nullptr;
  std::string partial;
};

void emit(Stream& stream, const std::string& line,
          const std::function<void(const std::string&, std::chrono::system_clock::time_point)>& on_line) {
  std::fwrite(line.data(), 1, line.size(), stream.out);
  std::fputc('\n', stream.out);
  std::fflush(stream.out);
  on_line(line, std::chrono::system_clock::now());
}

// Reads what is there; false at end of file.
bool drain(Stream& stream,
           const std::function<void(const std::string&, std::chrono::system_clock::time_point)>& on_line) {
  char buffer[65536];
  const ssize_t n = ::read(stream.fd, buffer, sizeof(buffer));
  if (n < 0) return errno == EINTR || errno == EAGAIN;
  if (n == 0) {
    if (!stream.partial.empty()) emit(stream, stream.partial, on_line);
    stream.partial.clear();
    return false;
  }
  stream.partial.append(buffer, static_cast<size_t>(n));
  for (size_t end; (end = stream.partial.find('\n')) != std::string::npos;) {
    emit(stream, stream.partial.substr(0, end), on_line);
    stream.partial.erase(0, end + 1);
  }
  return true;
}

[[noreturn]] void exec_child(const std::vector<std::string>& argv, int out, int err) {
  ::dup2(out, STDOUT_FILENO);
  ::dup2(err, STDERR_FILENO);
  std::vector<char*> args;
  for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  ::execvp(args[0], args.data());
  std::fprintf(stderr, "sluice supervise: cannot start %s: %s\n", args[0], std::strerror(errno));
  std::_Exit(127);
}

}  // namespace

void forward_stop_signals() {
  struct sigaction action {};
  action.sa_handler = pass_on;
  sigemptyset(&action.sa_mask);
  for (int signal : {SIGTERM, SIGUSR1, SIGINT}) ::sigaction(signal, &action, nullptr);
}

int received_stop_signal() { return stop_signal.load(); }

int run_round(const std::vector<std::string>& argv,
              const std::function<void(const std::string&, std::chrono::system_clock::time_point)>& on_line) {
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) return 127;
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) return 127;
  if (pid == 0) exec_child(argv, out[1], err[1]);
  child_pid.store(pid);
  // A signal that came before the child existed still reaches it.
  if (const int signal = stop_signal.load()) ::kill(pid, signal);
  ::close(out[1]);
  ::close(err[1]);
  Stream streams[2] = {{out[0], stdout, {}}, {err[0], stderr, {}}};
  bool open[2] = {true, true};
  int status = 0;
  bool exited = false;
  auto exited_at = std::chrono::steady_clock::now();
  while (open[0] || open[1]) {
    pollfd fds[2];
    for (int i = 0; i < 2; ++i) fds[i] = {open[i] ? streams[i].fd : -1, POLLIN, 0};
    const int ready = ::poll(fds, 2, 200);
    for (int i = 0; i < 2 && ready > 0; ++i) {
      if (open[i] && (fds[i].revents & (POLLIN | POLLHUP | POLLERR))) open[i] = drain(streams[i], on_line);
    }
    if (!exited && ::waitpid(pid, &status, WNOHANG) == pid) {
      exited = true;
      exited_at = std::chrono::steady_clock::now();
    }
    // A rank the launcher left behind may hold the pipes open; the round is over without it.
    if (exited && std::chrono::steady_clock::now() - exited_at > std::chrono::seconds(5)) break;
  }
  for (int i = 0; i < 2; ++i) ::close(streams[i].fd);
  if (!exited) {
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
  child_pid.store(0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace sluice::supervisor
