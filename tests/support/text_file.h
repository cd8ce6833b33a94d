#pragma once
// A whole file as text in the end-to-end tests (logs, /proc entries, cgroup files); empty when it
// cannot be read.
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace sluice::test {

inline std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace sluice::test
