#pragma once
// A content fingerprint: 128-bit XXH3 over a sequence of labelled fields. Used to decide whether
// a cache was made from exactly these inputs and settings. Labels are hashed with their lengths,
// so ("ab","c") and ("a","bc") differ.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace sluice {

class Fingerprint {
 public:
  Fingerprint();
  ~Fingerprint();
  Fingerprint(const Fingerprint&) = delete;
  Fingerprint& operator=(const Fingerprint&) = delete;

  Fingerprint& add(std::string_view label, std::string_view value);
  Fingerprint& add(std::string_view label, int64_t value);

  // 32 lowercase hex digits.
  std::string hex() const;

 private:
  void update(const void* data, size_t size);
  struct State;
  std::unique_ptr<State> state_;
};

// XXH64 of a byte string as 16 hex digits: a quick checksum, not a fingerprint.
std::string xxh64_hex(std::string_view bytes);

}  // namespace sluice
