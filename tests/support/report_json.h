#pragma once
// Reading a run's report.json in the end-to-end tests of the report.
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

namespace sluice::test {

inline nlohmann::json read_json(const std::filesystem::path& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

// The verdict of `kind` in report.json, or null.
inline nlohmann::json verdict(const nlohmann::json& report, const std::string& kind) {
  for (const auto& v : report["verdicts"]) {
    if (v["kind"] == kind) return v;
  }
  return nullptr;
}

// Every verdict's kind, for failure messages.
inline std::string verdict_kinds(const nlohmann::json& report) {
  std::string all;
  for (const auto& v : report["verdicts"]) all += v["kind"].get<std::string>() + " ";
  return all;
}

// Every verdict as "kind SEVERITY: summary -> recommendation", one a line, for failure messages.
inline std::string verdict_text(const nlohmann::json& report) {
  std::string all;
  for (const auto& v : report["verdicts"]) {
    all += v["kind"].get<std::string>() + " " + v["severity"].get<std::string>() + ": " +
           v["summary"].get<std::string>() + " -> " + v["recommendation"].get<std::string>() + "\n";
  }
  return all;
}

}  // namespace sluice::test
