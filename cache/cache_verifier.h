#pragma once
// `sluice cache verify DIR`: reads every chunk of every dataset of every file of a cache (so every
// fletcher32 checksum is checked: a bad one surfaces as a failed read of that chunk), checks each
// shard's strings_xxh64 (fletcher32 on variable-length strings covers only heap references), the
// offsets (monotonic, starting at 0, ending at the dataset's length), the format attributes, that
// every shard's fingerprint is the manifest's, and that the manifest's counts and the index agree
// with the shards row by row. Per-bin mel statistics, where present: each shard's /mel_sum and
// /mel_sum_sq must equal the sums of its /mel frames, and manifest.json's "mel_statistics" must be
// what the shards' sums give (a mismatch names the field, e.g. mel_statistics.mean[3]). A cache
// written before those statistics existed gets a note, not a fault.
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace sluice::cache {

struct VerifyFault {
  std::string file;  // relative to the cache dir: "shard-00003.h5", "index.h5", "manifest.json"
  int64_t row = -1;  // the shard's row (index.h5: the index row); -1 when not one sample's
  std::string sample_id;  // when known
  std::string problem;    // what is wrong, with the dataset and the element range where known
};

struct VerifyResult {
  std::filesystem::path dir;
  std::vector<VerifyFault> faults;
  std::vector<std::string> notes;  // harmless: leftover temporaries, shard files not listed
  int64_t shards_checked = 0;
  int64_t samples_checked = 0;
  int64_t chunks_checked = 0;
  int64_t bytes_checked = 0;  // bytes read through the checksum filter (as decoded)

  bool ok() const { return faults.empty(); }
  std::string to_text() const;
  nlohmann::json to_json() const;
};

// Never throws for a damaged cache: every problem found becomes a fault (a missing manifest too).
VerifyResult verify_cache(const std::filesystem::path& dir);

// One shard file on its own (no manifest or index needed): every chunk's checksum, the strings'
// digest, offsets, shapes, per-bin sums and the chunk address table, and that it carries
// `expected_fingerprint` and the shard number of its name. What `sluice prep` checks before it
// keeps a shard from an earlier run. Never throws for a damaged shard.
VerifyResult verify_shard(const std::filesystem::path& shard_file, const std::string& expected_fingerprint);

}  // namespace sluice::cache
