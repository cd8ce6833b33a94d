#include "common/error.h"

#include <cerrno>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <new>
#include <system_error>

namespace sluice {

const char* to_string(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::config: return "config error";
    case ErrorKind::data: return "data error";
    case ErrorKind::cache: return "cache error";
    case ErrorKind::transport: return "transport error";
    case ErrorKind::internal: return "internal error";
    case ErrorKind::environment: return "environment error";
  }
  return "error";
}

bool is_environment_errno(int error_number) {
  switch (error_number) {
    case ENOSPC:
    case EDQUOT:
    case EROFS:
    case EACCES:
    case EPERM:
      return true;
    default:
      return false;
  }
}

std::string describe_errno(int error_number) {
  std::string text = std::strerror(error_number);
  if (!text.empty()) text[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(text[0])));
  return text;
}

std::string environment_advice(int error_number, const std::string& path) {
  // df needs a path that exists: the file's directory (the file itself may be a removed temporary).
  const std::string dir = std::filesystem::path(path).parent_path().string();
  switch (error_number) {
    case ENOSPC: return "free space on that file system (df -h " + (dir.empty() ? "." : dir) + ") or write elsewhere, then rerun";
    case EDQUOT: return "your disk quota is used up: free space within it (quota -s) or write elsewhere, then rerun";
    case EROFS: return "that file system is mounted read-only: write elsewhere, then rerun";
    case EACCES:
    case EPERM: return "this user may not write there: fix the permissions (ls -ld) or write elsewhere, then rerun";
    default: return "";
  }
}

void throw_file_error(int error_number, const std::string& action, const std::string& path, ErrorKind otherwise) {
  if (is_environment_errno(error_number)) {
    throw EnvironmentError(describe_errno(error_number) + ": cannot " + action + " " + path + "; " +
                           environment_advice(error_number, path));
  }
  throw Error(otherwise, "cannot " + action + " " + path + ": " + std::strerror(error_number));
}

std::optional<EnvironmentError> machine_refusal(const std::exception& error) {
  // The limits a job meets: `ulimit -v` and `ulimit -u`, a Slurm job's or a container's memory
  // cgroup, a node whose memory other jobs took.
  constexpr const char* limits =
      "check `ulimit -v` and `ulimit -u`, the job's memory limit (Slurm --mem, the container's cgroup) and what "
      "else runs on the node; or lower the work per rank (prep.threads, train.reader_threads, train.credits, "
      "train.batch_size)";
  if (dynamic_cast<const std::bad_alloc*>(&error) != nullptr) {
    return EnvironmentError(std::string("out of memory: an allocation was refused (") + error.what() + "); " + limits);
  }
  if (const auto* system = dynamic_cast<const std::system_error*>(&error)) {
    const int code = system->code().value();
    if (system->code().category() == std::generic_category() || system->code().category() == std::system_category()) {
      if (code == EAGAIN || code == ENOMEM) {
        return EnvironmentError(describe_errno(code) + ": a thread or its memory was refused (" + error.what() +
                                "); " + limits);
      }
    }
  }
  return std::nullopt;
}

bool is_memory_refusal(const std::string& message) { return message.find("`ulimit -v`") != std::string::npos; }

}  // namespace sluice
