#include "common/fingerprint.h"

#include <cstdio>

#include <xxhash.h>

namespace sluice {

struct Fingerprint::State {
  XXH3_state_t* xxh = XXH3_createState();
  ~State() { XXH3_freeState(xxh); }
};

Fingerprint::Fingerprint() : state_(std::make_unique<State>()) { XXH3_128bits_reset(state_->xxh); }
Fingerprint::~Fingerprint() = default;

void Fingerprint::update(const void* data, size_t size) { XXH3_128bits_update(state_->xxh, data, size); }

Fingerprint& Fingerprint::add(std::string_view label, std::string_view value) {
  const uint64_t sizes[2] = {label.size(), value.size()};
  update(sizes, sizeof(sizes));
  update(label.data(), label.size());
  update(value.data(), value.size());
  return *this;
}

Fingerprint& Fingerprint::add(std::string_view label, int64_t value) {
  return add(label, std::string_view(reinterpret_cast<const char*>(&value), sizeof(value)));
}

std::string Fingerprint::hex() const {
  XXH128_hash_t digest = XXH3_128bits_digest(state_->xxh);
  char text[33];
  std::snprintf(text, sizeof(text), "%016llx%016llx", static_cast<unsigned long long>(digest.high64),
                static_cast<unsigned long long>(digest.low64));
  return text;
}

std::string xxh64_hex(std::string_view bytes) {
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx",
                static_cast<unsigned long long>(XXH64(bytes.data(), bytes.size(), 0)));
  return text;
}

}  // namespace sluice
