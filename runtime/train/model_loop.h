#pragma once
// A C++ model rank of `sluice train`: trains sluice's model over the rank's batch stream
// (batch_stream.h, the model side it shares with Python model ranks), logs, validates and
// checkpoints (the first model rank).
//
// Per global step: the stream's next batch (batch_wait span; the slot is on loan) -> train_step
// (forward, backward with the gradient all-reduce, optimizer spans) -> end_step: the slot goes
// back and the model ranks agree on every reason to stop (a stop signal, a non-finite loss) ->
// every train.log_every steps the mean loss over model ranks -> validation and checkpoint when
// due. At the end (or on a stop) the first model rank checkpoints; a finished run validates once
// more.
#include <nlohmann/json.hpp>

#include "runtime/train/model_side.h"

namespace sluice::runtime {

// Trains steps [setup.first_step, setup.end_step) and returns this rank's stats for
// ranks/rank-N.json: the model side of a C++ model rank (a ModelSide).
nlohmann::json train_model(const ModelRankParts& parts);

}  // namespace sluice::runtime
