#pragma once
// What run_train hands to a model rank's model side: the C++ model loop (train_model,
// model_loop.h) or a Python script's (embedded_model_rank.h). Both build their batch stream
// (batch_stream.h) from it and return the rank's stats for ranks/rank-N.json.
#include <functional>

#include <mpi.h>
#include <nlohmann/json.hpp>

#include "cache/cache_reader.h"
#include "common/mpi_session.h"
#include "model/gradient_reducer.h"
#include "runtime/train/train_run.h"
#include "runtime/train/train_settings.h"
#include "runtime/transport/feed_channel.h"

namespace sluice::runtime {

// Where a model rank's batches come from.
struct ModelFeed {
  // null: train.replay_from_memory (the batches are collated once per bucket on this rank).
  transport::ReceiveChannel* channel = nullptr;
  int data_rank = 0;            // the rank feeding this one (errors, spans)
  bool device_batches = false;  // the channel hands out device memory (GPU transports)
};

struct ModelRankParts {
  const MpiSession& session;
  const TrainSettings& settings;
  const RunSetup& setup;
  cache::CacheReader& reader;
  ModelFeed feed;
  MPI_Comm model_comm;  // the model ranks' communicator; MPI_COMM_NULL in a one-process run
  // Small all-reduces among the model ranks with liveness (the stop agreement); null without
  // other model ranks.
  model::GradientReducer* reducer;
  RankContext& context;
};

using ModelSide = std::function<nlohmann::json(const ModelRankParts& parts)>;

}  // namespace sluice::runtime
