#include "common/log.h"

#include <cstdlib>
#include <mutex>

#include <spdlog/sinks/stdout_color_sinks.h>

namespace sluice::log {
namespace {

std::mutex registry_mutex;
std::string identity = "rank - @ -";

spdlog::level::level_enum level_from_environment() {
  const char* text = std::getenv("SLUICE_LOG_LEVEL");
  if (text == nullptr) return spdlog::level::info;
  auto level = spdlog::level::from_str(text);
  // from_str maps anything unknown to "off"; a typo must not silence every log line.
  return (level == spdlog::level::off && std::string(text) != "off") ? spdlog::level::info : level;
}

std::string pattern() { return "[%H:%M:%S.%e] [" + identity + "] [%n] [%^%l%$] %v"; }

}  // namespace

void set_identity(int rank, const std::string& host) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  identity = "rank " + std::to_string(rank) + " @ " + host;
  spdlog::apply_all([](const std::shared_ptr<spdlog::logger>& logger) {
    logger->set_pattern(pattern());
  });
}

std::shared_ptr<spdlog::logger> get(const std::string& layer) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  if (auto existing = spdlog::get(layer)) return existing;
  // Logs go to stderr so that stdout stays clean for tables and JSON a user may pipe.
  auto logger = spdlog::stderr_color_mt(layer);
  logger->set_pattern(pattern());
  logger->set_level(level_from_environment());
  return logger;
}

}  // namespace sluice::log
