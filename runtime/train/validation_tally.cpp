#include "runtime/train/validation_tally.h"

#include <algorithm>

namespace sluice::runtime {

using nlohmann::json;

ValidationTally::ValidationTally(size_t corpora, std::vector<std::string> languages)
    : corpora_(corpora > 1 ? corpora : 0), languages_(languages.size() > 1 ? std::move(languages) : std::vector<std::string>{}),
      sums_(2 + 2 * corpora_ + 2 * languages_.size(), 0.0) {}

void ValidationTally::add(double mean_loss, double samples, size_t corpus, size_t language) {
  const auto add_at = [&](size_t at) {
    sums_[at] += mean_loss * samples;
    sums_[at + 1] += samples;
  };
  add_at(0);
  if (corpus < corpora_) add_at(2 + 2 * corpus);
  if (language < languages_.size()) add_at(2 + 2 * corpora_ + 2 * language);
}

void ValidationTally::clear() { std::fill(sums_.begin(), sums_.end(), 0.0); }

std::vector<float> ValidationTally::flat() const { return std::vector<float>(sums_.begin(), sums_.end()); }

void ValidationTally::describe(const float* reduced, json& record) const {
  const auto mean_at = [&](size_t at) {
    const float samples = reduced[at + 1];
    return samples > 0 ? json(static_cast<double>(reduced[at]) / static_cast<double>(samples)) : json(nullptr);
  };
  if (corpora_ > 0) {
    record["corpora"] = json::array();
    for (size_t c = 0; c < corpora_; ++c) record["corpora"].push_back(mean_at(2 + 2 * c));
  }
  if (!languages_.empty()) {
    record["languages"] = json::object();
    for (size_t l = 0; l < languages_.size(); ++l) record["languages"][languages_[l]] = mean_at(2 + 2 * corpora_ + 2 * l);
  }
}

}  // namespace sluice::runtime
