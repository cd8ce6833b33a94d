#pragma once
// The project's one error hierarchy (see docs/architecture.md, "Errors").
//
// A message says what failed, where (file, line, sample id, rank, host) and what to do. C return
// codes (MPI, HDF5, libsndfile, ...) become these exceptions in exactly one wrapper layer each.
// Errors raised on a background thread travel to the waiting thread as std::exception_ptr.
#include <stdexcept>
#include <string>

namespace sluice {

enum class ErrorKind { config, data, cache, transport, internal };

const char* to_string(ErrorKind kind);

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
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

}  // namespace sluice
