#include "common/error.h"

namespace sluice {

const char* to_string(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::config: return "config error";
    case ErrorKind::data: return "data error";
    case ErrorKind::cache: return "cache error";
    case ErrorKind::transport: return "transport error";
    case ErrorKind::internal: return "internal error";
  }
  return "error";
}

}  // namespace sluice
