#include "dataset/listing_encoding.h"

#include <cstdint>
#include <cstring>

#include "common/error.h"

namespace sluice::dataset {
namespace {

constexpr char magic[] = "SLST";
constexpr uint64_t version = 1;

class Writer {
 public:
  void number(uint64_t value) {
    while (value >= 0x80) {
      bytes_ += static_cast<char>((value & 0x7F) | 0x80);
      value >>= 7;
    }
    bytes_ += static_cast<char>(value);
  }
  // `value` against `previous`: the shared prefix's length, then the rest.
  void text(const std::string& value, const std::string& previous = {}) {
    size_t shared = 0;
    const size_t most = std::min(value.size(), previous.size());
    while (shared < most && value[shared] == previous[shared]) ++shared;
    number(shared);
    number(value.size() - shared);
    bytes_.append(value, shared, std::string::npos);
  }
  // A field whose previous value this writer keeps: `slot` holds it.
  void text_after(const std::string& value, std::string& slot) {
    text(value, slot);
    slot = value;
  }
  std::string take() { return std::move(bytes_); }
  void raw(const char* data, size_t size) { bytes_.append(data, size); }

 private:
  std::string bytes_;
};

class Reader {
 public:
  explicit Reader(const std::string& bytes) : bytes_(bytes) {}

  uint64_t number() {
    uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      const auto byte = static_cast<unsigned char>(next_byte());
      value |= static_cast<uint64_t>(byte & 0x7F) << shift;
      if ((byte & 0x80) == 0) return value;
    }
    fail("a number longer than 64 bits");
  }
  // A count of things that each take at least one byte: never more than the bytes left.
  size_t count(const char* what) {
    const uint64_t value = number();
    if (value > bytes_.size() - at_) fail(std::string("a count of ") + what + " larger than the bytes left");
    return static_cast<size_t>(value);
  }
  std::string text(const std::string& previous = {}) {
    const uint64_t shared = number();
    if (shared > previous.size()) fail("a shared prefix longer than the value it shares");
    const uint64_t rest = number();
    if (rest > bytes_.size() - at_) fail("a string longer than the bytes left");
    std::string value = previous.substr(0, static_cast<size_t>(shared));
    value.append(bytes_, at_, static_cast<size_t>(rest));
    at_ += static_cast<size_t>(rest);
    return value;
  }
  std::string text_after(std::string& slot) {
    slot = text(slot);
    return slot;
  }
  void expect(const char* data, size_t size) {
    if (bytes_.size() - at_ < size || bytes_.compare(at_, size, data, size) != 0) fail("no SLST header");
    at_ += size;
  }
  bool done() const { return at_ == bytes_.size(); }

  [[noreturn]] void fail(const std::string& what) const {
    throw Error(ErrorKind::internal, "the encoded corpus listing (" + std::to_string(bytes_.size()) +
                                         " bytes) is damaged at byte " + std::to_string(at_) + ": " + what +
                                         ". It is made and read by the same sluice binary: report this as a bug");
  }

 private:
  char next_byte() {
    if (at_ >= bytes_.size()) fail("it ends early");
    return bytes_[at_++];
  }

  const std::string& bytes_;
  size_t at_ = 0;
};

// The previous item's value of each string field (see the format in the header).
struct PreviousItem {
  std::string source, id, audio, text, speaker, language, reject_detail;
  std::vector<std::string> keys, values;
};

std::string& slot(std::vector<std::string>& slots, size_t index) {
  if (slots.size() <= index) slots.resize(index + 1);
  return slots[index];
}

}  // namespace

std::string encode_listing(const CorpusListing& listing) {
  Writer out;
  out.raw(magic, std::strlen(magic));
  out.number(version);
  out.text(listing.root.string());
  out.text(listing.listing_file.string());
  out.text(listing.format);
  out.text(listing.recognised);
  out.number(listing.notes.size());
  std::string previous_note;
  for (const auto& note : listing.notes) out.text_after(note, previous_note);
  out.number(listing.items.size());
  PreviousItem previous;
  for (const CorpusItem& item : listing.items) {
    out.text_after(item.source, previous.source);
    out.text_after(item.id, previous.id);
    out.text_after(item.audio.string(), previous.audio);
    out.text_after(item.text, previous.text);
    out.text_after(item.speaker, previous.speaker);
    out.text_after(item.language, previous.language);
    out.number(item.reject ? static_cast<uint64_t>(*item.reject) + 1 : 0);
    if (item.reject) out.text_after(item.reject_detail, previous.reject_detail);
    out.number(item.metadata.size());
    size_t index = 0;
    for (const auto& [key, value] : item.metadata) {
      out.text_after(key, slot(previous.keys, index));
      out.text_after(value, slot(previous.values, index));
      ++index;
    }
  }
  return out.take();
}

CorpusListing decode_listing(const std::string& bytes) {
  Reader in(bytes);
  in.expect(magic, std::strlen(magic));
  if (const uint64_t found = in.number(); found != version) {
    in.fail("version " + std::to_string(found) + ", not " + std::to_string(version));
  }
  CorpusListing listing;
  listing.root = in.text();
  listing.listing_file = in.text();
  listing.format = in.text();
  listing.recognised = in.text();
  std::string previous_note;
  for (size_t n = in.count("notes"); n > 0; --n) listing.notes.push_back(in.text_after(previous_note));
  const size_t items = in.count("items");
  listing.items.reserve(items);
  PreviousItem previous;
  for (size_t i = 0; i < items; ++i) {
    CorpusItem item;
    item.source = in.text_after(previous.source);
    item.id = in.text_after(previous.id);
    item.audio = in.text_after(previous.audio);
    item.text = in.text_after(previous.text);
    item.speaker = in.text_after(previous.speaker);
    item.language = in.text_after(previous.language);
    if (const uint64_t reject = in.number(); reject > 0) {
      const auto reason = static_cast<RejectReason>(reject - 1);
      if (std::strcmp(to_string(reason), "unknown") == 0) in.fail("reject reason " + std::to_string(reject - 1));
      item.reject = reason;
      item.reject_detail = in.text_after(previous.reject_detail);
    }
    const size_t entries = in.count("metadata entries");
    for (size_t index = 0; index < entries; ++index) {
      std::string key = in.text_after(slot(previous.keys, index));
      item.metadata[std::move(key)] = in.text_after(slot(previous.values, index));
    }
    listing.items.push_back(std::move(item));
  }
  if (!in.done()) in.fail("bytes left over after the last item");
  return listing;
}

}  // namespace sluice::dataset
