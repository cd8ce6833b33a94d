#include "dataset/reject.h"

namespace sluice::dataset {

const char* to_string(RejectReason reason) {
  switch (reason) {
    case RejectReason::missing_audio: return "missing_audio";
    case RejectReason::empty_audio: return "empty_audio";
    case RejectReason::unreadable_audio: return "unreadable_audio";
    case RejectReason::truncated_audio: return "truncated_audio";
    case RejectReason::non_finite_audio: return "non_finite_audio";
    case RejectReason::too_short: return "too_short";
    case RejectReason::too_long: return "too_long";
    case RejectReason::empty_text: return "empty_text";
    case RejectReason::missing_text: return "missing_text";
    case RejectReason::malformed_row: return "malformed_row";
    case RejectReason::duplicate_id: return "duplicate_id";
    case RejectReason::path_escapes_root: return "path_escapes_root";
    case RejectReason::invalid_text: return "invalid_text";
    case RejectReason::unsupported_language: return "unsupported_language";
    case RejectReason::non_finite_features: return "non_finite_features";
    case RejectReason::too_many_tokens: return "too_many_tokens";
  }
  return "unknown";
}

}  // namespace sluice::dataset
