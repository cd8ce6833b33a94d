#pragma once
// What a validation pass sums on a model rank, for the one all-reduce that ends it: loss x samples
// and samples over the whole pass, per cache of a mixture, and per language of the caches. A
// validation batch never mixes caches or languages (BatchStream::next_validation()), so each
// batch's mean loss is one cache's and one language's. Both model sides keep one: the C++ model
// loop (model_loop.cpp) and a Python rank's batch stream (batch_stream.cpp), so a pass's record
// ("validation" in ranks/rank-N.json) reads the same from either:
//   {"global_step", "loss", "corpora": [loss or null per cache] (a mixture only),
//    "languages": {code: loss or null} (more than one language only)}
// Bounded: two floats per cache and per language (a language code is 16 bits in the index).
#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace sluice::runtime {

class ValidationTally {
 public:
  // `corpora`: the caches of the run (per-cache sums only above one); `languages`: their unified
  // language codes (CacheReader::languages(); per-language sums only above one).
  ValidationTally(size_t corpora, std::vector<std::string> languages);

  void add(double mean_loss, double samples, size_t corpus, size_t language);
  void clear();
  double loss_sum() const { return sums_[0]; }
  double samples() const { return sums_[1]; }
  // This rank's mean loss over the pass so far (0 without samples): what a non-finite pass names.
  double mean() const { return samples() > 0 ? loss_sum() / samples() : 0.0; }

  // The sums in the all-reduce's order: loss x samples, samples, then per cache, then per language.
  std::vector<float> flat() const;
  // A pass's breakdown from `reduced` (flat() summed over the model ranks): "corpora" and
  // "languages" set on `record` where there is more than one of them.
  void describe(const float* reduced, nlohmann::json& record) const;

 private:
  size_t corpora_;                      // 0 without a mixture
  std::vector<std::string> languages_;  // empty with one language
  std::vector<double> sums_;            // flat()'s layout, in double
};

}  // namespace sluice::runtime
