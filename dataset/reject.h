#pragma once
// Why an input sample was skipped. Every skipped sample is written to rejects.jsonl with one of
// these reasons (docs/cache-format.md); none is dropped silently.
#include <string>

#include "common/error.h"

namespace sluice::dataset {

enum class RejectReason {
  missing_audio,      // the audio file does not exist
  empty_audio,        // the file decodes to zero samples
  unreadable_audio,   // libsndfile cannot open or decode it
  truncated_audio,    // fewer frames could be read than the header promises
  non_finite_audio,   // NaN or Inf samples
  too_short,          // shorter than prep.min_seconds
  too_long,           // longer than prep.max_seconds
  empty_text,         // no text left after normalisation
  missing_text,       // audio whose transcript the corpus lacks (LibriTTS, VCTK)
  malformed_row,      // metadata row / manifest line that cannot be parsed
  duplicate_id,       // an id seen earlier in the corpus
  path_escapes_root,  // id or audio path that resolves outside the corpus root
  invalid_text,       // text that is not valid UTF-8
  unsupported_language,  // phonemes asked for a language espeak-ng has no voice for
  non_finite_features,   // finite audio whose log-mel is not (samples so large their power overflows)
  too_many_tokens,       // more tokens than prep.max_tokens, or more per second of audio than
                         // prep.max_tokens_per_second: a transcript that does not belong to its clip
};

const char* to_string(RejectReason reason);

// Thrown for one sample that must be skipped; the caller records it and carries on.
class SampleRejected : public DataError {
 public:
  SampleRejected(RejectReason reason, const std::string& detail)
      : DataError(std::string(to_string(reason)) + ": " + detail), reason_(reason), detail_(detail) {}
  RejectReason reason() const { return reason_; }
  const std::string& detail() const { return detail_; }

 private:
  RejectReason reason_;
  std::string detail_;
};

}  // namespace sluice::dataset
