#pragma once
// A model side other than the C++ model loop (model_loop.h): what run_train hands to it, in
// place of train_model, on a rank whose training runs elsewhere (a Python model rank:
// embedded_model_rank.h). It gets exactly what the model loop gets, plus the model ranks'
// communicator, and returns the rank's stats for ranks/rank-N.json as train_model does.
#include <functional>

#include <mpi.h>
#include <nlohmann/json.hpp>

#include "cache/cache_reader.h"
#include "common/mpi_session.h"
#include "model/gradient_reducer.h"
#include "runtime/train/model_loop.h"
#include "runtime/train/train_run.h"
#include "runtime/train/train_settings.h"

namespace sluice::runtime {

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
