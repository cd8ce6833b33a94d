#pragma once
// trace.json in the Chrome trace event format (Perfetto and chrome://tracing open it):
//   - one process per rank (pid = rank), named "rank 3 · host · GPU1 · model" (process_name);
//   - one thread per lane (tid = lane id), named after the lane (thread_name);
//   - an "X" complete event per span: name = stage, args {step, bytes, peer, sequence};
//   - a flow ("s" at the data rank's send, "f" with bp "e" inside the model rank's batch_wait) per
//     batch, id = flow_id(data rank, model rank, sequence), unique per (src, dst, seq);
//   - "C" counter events per counter sample (queue_depth, credits), named after the counter.
// Times are microseconds on rank 0's clock, relative to the earliest aligned span.
#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "timing/timeline_file.h"

namespace sluice::report {

// (src, dst, seq) -> one number below 2^53 (exact in JavaScript): src x world + dst in the high
// bits, the sequence in the low 28.
int64_t flow_id(int source, int destination, int64_t sequence, int world_size);

// `aligned`: timelines already on the reference clock (align_to_reference).
nlohmann::json chrome_trace(const std::vector<timing::RankTimeline>& aligned);

}  // namespace sluice::report
