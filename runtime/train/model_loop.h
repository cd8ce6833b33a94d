#pragma once
// A model rank's side of `sluice train`: receive a batch, train on it, log, validate, checkpoint
// (the first model rank), agree with the other model ranks on a stop signal.
//
// Per global step: receive (batch_wait span; the channel's slot is on loan) -> check the
// batch's (epoch, step) against the plan -> train_step (forward, backward with the gradient
// all-reduce, optimizer spans) -> release the slot -> a one-float all-reduce on whether any
// model rank got a stop signal -> every train.log_every steps the mean loss over model ranks ->
// live status -> validation and checkpoint when due. At the end (or on a stop) the first model
// rank checkpoints; a finished run validates once more.
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

// Trains steps [setup.first_step, setup.end_step) and returns this rank's stats for
// ranks/rank-N.json. `reducer` (null without other model ranks) must outlive the call.
nlohmann::json train_model(const MpiSession& session, const TrainSettings& settings, const RunSetup& setup,
                           cache::CacheReader& reader, const ModelFeed& feed, model::GradientReducer* reducer,
                           RankContext& context);

}  // namespace sluice::runtime
