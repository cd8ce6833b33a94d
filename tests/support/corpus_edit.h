#pragma once
// Corpus and cache files for the tests that damage an input on purpose: a copy of an LJSpeech
// folder with one row's text replaced, and the first reject a prep recorded.
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

namespace sluice::test {

// A copy of the LJSpeech folder `corpus` at `copy` whose row `id` holds `text` instead.
inline void copy_corpus_with_text(const std::filesystem::path& corpus, const std::filesystem::path& copy,
                                  const std::string& id, const std::string& text) {
  std::filesystem::copy(corpus, copy, std::filesystem::copy_options::recursive);
  std::ifstream in(copy / "metadata.csv");
  std::string rows, row;
  while (std::getline(in, row)) rows += (row.rfind(id + "|", 0) == 0 ? id + "|" + text + "|" : row) + "\n";
  in.close();
  std::ofstream(copy / "metadata.csv") << rows;
}

// The first line of CACHE/rejects.jsonl, parsed; null when there is none.
inline nlohmann::json first_reject(const std::filesystem::path& cache) {
  std::ifstream rejects(cache / "rejects.jsonl");
  std::string line;
  return std::getline(rejects, line) ? nlohmann::json::parse(line) : nlohmann::json();
}

}  // namespace sluice::test
