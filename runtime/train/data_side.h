#pragma once
// A data rank's work on its batches besides reading and sending (the feeder's BatchWork,
// runtime/train/batch_feeder.h), and what that work needs:
//  - feature work (train.normalize_mels, masks): in the reader threads on the host, or on the
//    data rank's GPU when batches travel in device memory (nccl, cuda_ipc);
//  - pinned host memory that a GPU data rank collates into, so that the upload runs at the
//    bus's rate with no staging copy;
//  - the upload to the data rank's GPU (nccl sends from there; cuda_ipc needs it only for GPU
//    work, else it copies from pinned memory straight into the model rank's slot).
// docs/architecture.md, "Batches on GPUs", tells the whole path.
#include <cstddef>
#include <memory>
#include <memory_resource>
#include <string>

#include <nlohmann/json.hpp>

#include "common/mpi_session.h"
#include "model/feature_transform.h"
#include "runtime/train/batch_feeder.h"
#include "runtime/train/role_plan.h"
#include "runtime/train/torch_parts.h"
#include "runtime/train/train_settings.h"
#include "runtime/transport/device_memory.h"

namespace sluice::runtime {

class DataSide final : public BatchWork {
 public:
  // `me`: this rank, which runs the data side (a data rank, or one process doing both);
  // `backend`: the run's resolved transport (RolePlan::transport); `slot_bytes`: the plan's
  // largest batch (the upload buffer's size); `torch`: the process's libtorch parts (null in a
  // Python model rank's process). On a GPU data rank it caps the rank's torch memory at
  // roles.data_gpu_memory_fraction, and throws ConfigError when the upload buffer alone exceeds
  // that share, or when the process has no libtorch for the GPU's feature work.
  DataSide(const MpiSession& session, const TrainSettings& settings, const RankPlacement& me,
           const std::string& backend, const model::FeatureTransformSettings& features, size_t slot_bytes,
           const TorchParts* torch);
  ~DataSide() override;
  DataSide(const DataSide&) = delete;
  DataSide& operator=(const DataSide&) = delete;

  // FeedOptions::batch_memory: pinned memory on a GPU data rank, else the heap. Owned here, so
  // the DataSide must outlive the feeder and its batches.
  std::pmr::memory_resource* batch_memory() const;
  // FeedOptions::work: this, or null when there is no work to do on a batch.
  BatchWork* work();
  // The feature work, for the log ("normalise 80 bins, ..."); null when there is none.
  const model::FeatureTransform* transform() const;

  // Host feature work (normalisation and masks on a CPU data rank).
  void on_collated(BatchBytes& batch, int64_t global_step) override;
  // GPU data ranks: the batch uploaded and transformed there; else nullptr (send the host bytes).
  const void* to_send(const BatchBytes& batch, int64_t global_step, int target_rank) override;

 private:
  void set_up_gpu(const MpiSession& session, const TrainSettings& settings, const RankPlacement& me,
                  const std::string& backend, const model::FeatureTransformSettings& features,
                  size_t slot_bytes, const TorchParts* torch);

  std::unique_ptr<std::pmr::memory_resource> pinned_;
  std::unique_ptr<model::FeatureTransform> host_transform_, gpu_transform_;
  std::unique_ptr<transport::DeviceUpload> upload_;
};

// A data rank's FeedStats as its ranks/rank-N.json.
nlohmann::json feed_stats_json(const FeedStats& stats, int rank);

// The report's baseline for host transports (mpi, inproc): bytes per second of a plain memcpy of
// `bytes` (the plan's largest batch) on this rank, best of 5.
double host_copy_bandwidth(size_t bytes);

}  // namespace sluice::runtime
