#pragma once
// The project's one error hierarchy (see docs/architecture.md, "Errors").
//
// A message says what failed, where (file, line, sample id, rank, host) and what to do. C return
// codes (MPI, HDF5, libsndfile, ...) become these exceptions in exactly one wrapper layer each.
// Errors raised on a background thread travel to the waiting thread as std::exception_ptr.
#include <optional>
#include <stdexcept>
#include <string>

namespace sluice {

// environment: the machine refused what the job needed (no space left on the device, a quota, a
// read-only file system, no permission). Nothing in the inputs or the cache is wrong: fix the
// machine (free space, mount, permissions) and rerun; a prep rerun resumes.
enum class ErrorKind { config, data, cache, transport, internal, environment };

const char* to_string(ErrorKind kind);

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

  // Raised alike on every rank of the job: from what all ranks read the same way (an agreement's
  // outcome, a refusal rank 0 broadcast). Rank 0 says it and every rank exits with its code; an
  // error without the mark is said by the rank that saw it, which ends the job (launcher/launch.cpp,
  // end_job). Config errors raised before the ranks start their parts of the job count as marked.
  bool on_every_rank() const { return on_every_rank_; }
  void mark_on_every_rank() { on_every_rank_ = true; }
  // What a peer's failure did here: a channel to it aborted (it unwound on its own error). The
  // launcher then waits a moment for that peer's failure announcement and ends with its code.
  bool after_peer_failure() const { return after_peer_failure_; }
  void mark_after_peer_failure() { after_peer_failure_ = true; }
  // This error's marks on `wrapped`, a new error with more context that replaces it.
  template <class E>
  E carry_marks_to(E wrapped) const {
    if (on_every_rank_) wrapped.mark_on_every_rank();
    if (after_peer_failure_) wrapped.mark_after_peer_failure();
    return wrapped;
  }

 private:
  ErrorKind kind_;
  bool on_every_rank_ = false;
  bool after_peer_failure_ = false;
};

// A setting is wrong: unknown key, wrong type, value out of range, inconsistent options.
class ConfigError : public Error {
 public:
  explicit ConfigError(const std::string& message) : Error(ErrorKind::config, message) {}
};

// The input corpus is wrong: unreadable audio, malformed metadata, bad text.
class DataError : public Error {
 public:
  explicit DataError(const std::string& message) : Error(ErrorKind::data, message) {}
};

// The feature cache is missing, stale, corrupt, or cannot be written.
class CacheError : public Error {
 public:
  explicit CacheError(const std::string& message) : Error(ErrorKind::cache, message) {}
};

// Moving bytes between ranks failed or timed out.
class TransportError : public Error {
 public:
  explicit TransportError(const std::string& message) : Error(ErrorKind::transport, message) {}
};

// The file system or the machine refused: ENOSPC, EDQUOT, EROFS, EACCES, EPERM. The message names
// the path and the reason, and says what to do.
class EnvironmentError : public Error {
 public:
  explicit EnvironmentError(const std::string& message) : Error(ErrorKind::environment, message) {}
};

// Whether a failed system call's errno means the environment refused (see EnvironmentError)
// rather than a bug or bad data.
bool is_environment_errno(int error_number);

// "no space left on device" for ENOSPC etc.: strerror in lower case, for the start of a message.
std::string describe_errno(int error_number);

// Throws EnvironmentError for an environment errno, else Error(otherwise). The message is
// "<describe_errno>: cannot <action> <path>" followed by what to do for the environment cases
// ("free space on that file system", ...), or "cannot <action> <path>: <strerror>" otherwise.
[[noreturn]] void throw_file_error(int error_number, const std::string& action, const std::string& path,
                                   ErrorKind otherwise);

// Memory or threads the machine would not give (std::bad_alloc; std::system_error with EAGAIN or
// ENOMEM, as std::thread throws when no thread can start) are its refusal too: the
// EnvironmentError that says so and what to do; nullopt for any other exception.
std::optional<EnvironmentError> machine_refusal(const std::exception& error);

// Whether an error's text is one of memory refused (machine_refusal's, or an address-space limit
// refused up front, common/address_space.h): both name `ulimit -v`. The report's advice then
// names the memory limits, not the disk.
bool is_memory_refusal(const std::string& message);

// What to do about an environment errno on the file `path` ("free space on that file system (df -h
// DIR)", DIR being path's directory, ...); empty for other errnos.
std::string environment_advice(int error_number, const std::string& path);

}  // namespace sluice
