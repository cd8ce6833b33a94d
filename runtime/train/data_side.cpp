#include "runtime/train/data_side.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "common/clock.h"
#include "common/error.h"
#include "runtime/train/batch_views.h"
#include "runtime/transport/feed_factory.h"
#include "timing/span_recorder.h"

namespace sluice::runtime {

using nlohmann::json;

DataSide::DataSide(const MpiSession& session, const TrainSettings& settings, const RankPlacement& me,
                   const std::string& backend, const model::FeatureTransformSettings& features,
                   size_t slot_bytes, const TorchParts* torch) {
  // Feature work runs on the data side: on the data rank's GPU when the batches travel in device
  // memory, else in the reader threads on the host.
  if (me.role == Role::data && transport::moves_device_memory(backend) && me.gpu >= 0) {
    set_up_gpu(session, settings, me, backend, features, slot_bytes, torch);
  } else {
    host_transform_ = std::make_unique<model::FeatureTransform>(features, "cpu");
    if (!host_transform_->active()) host_transform_.reset();
  }
}

DataSide::~DataSide() = default;

void DataSide::set_up_gpu(const MpiSession& session, const TrainSettings& settings, const RankPlacement& me,
                          const std::string& backend, const model::FeatureTransformSettings& features,
                          size_t slot_bytes, const TorchParts* torch) {
  if (torch == nullptr) {
    throw ConfigError("rank " + std::to_string(session.rank()) + " is a GPU data rank, whose memory cap and feature "
                      "work are libtorch's, but this process links no libtorch: data ranks are `sluice train` processes");
  }
  // Batches are collated straight into pinned memory: the upload (or cuda_ipc's copy into the
  // model rank's slot) then runs at the bus's rate, with no staging copy.
  pinned_ = transport::make_pinned_memory_resource(me.gpu);
  const double fraction = settings.roles.data_gpu_memory_fraction;
  if (fraction > 0) {
    const double cap = fraction * static_cast<double>(transport::device_total_bytes(me.gpu));
    if (static_cast<double>(slot_bytes) > cap) {
      throw ConfigError("data " + session.describe(session.rank()) + ": its GPU upload buffer of " +
                        std::to_string(slot_bytes >> 20) + " MiB (the largest batch) exceeds " +
                        "roles.data_gpu_memory_fraction " + std::to_string(fraction) + " of GPU " +
                        std::to_string(me.gpu) + ": raise it or lower train.batch_size / frame_budget");
    }
    torch->limit_gpu_memory(me.gpu, fraction);
  }
  if (!features.mean.empty() || features.masking.active()) {
    gpu_transform_ = torch->gpu_feature_transform(features, me.gpu);
  }
  // nccl sends from device memory; cuda_ipc copies host memory straight into the model rank's
  // slot, so it needs an upload only for GPU work.
  if (backend == "nccl" || gpu_transform_) upload_ = std::make_unique<transport::DeviceUpload>(me.gpu, slot_bytes);
}

std::pmr::memory_resource* DataSide::batch_memory() const {
  return pinned_ ? pinned_.get() : std::pmr::new_delete_resource();
}

BatchWork* DataSide::work() { return host_transform_ || upload_ ? this : nullptr; }

const model::FeatureTransform* DataSide::transform() const {
  return gpu_transform_ ? gpu_transform_.get() : host_transform_.get();
}

void DataSide::on_collated(BatchBytes& bytes, int64_t global_step) {
  if (!host_transform_) return;
  const BatchPointers batch = BatchPointers::of(bytes.data(), bytes.size());
  host_transform_->apply(mel_batch_of(batch, const_cast<float*>(batch.mels)), global_step, true);
}

const void* DataSide::to_send(const BatchBytes& bytes, int64_t global_step, int target_rank) {
  if (!upload_) return nullptr;
  void* on_gpu = nullptr;
  {
    timing::ScopedSpan span(timing::Stage::host_to_device, global_step, target_rank);
    span.set_bytes(static_cast<int64_t>(bytes.size()));
    on_gpu = upload_->upload(bytes.data(), bytes.size());
  }
  if (gpu_transform_) {
    timing::ScopedSpan span(timing::Stage::gpu_work, global_step, target_rank);
    const BatchPointers batch = BatchPointers::of(bytes.data(), bytes.size());
    const auto mels_offset = reinterpret_cast<const std::byte*>(batch.mels) - bytes.data();
    auto* mels_on_gpu = reinterpret_cast<float*>(static_cast<std::byte*>(on_gpu) + mels_offset);
    gpu_transform_->apply(mel_batch_of(batch, mels_on_gpu), global_step, true);
  }
  return on_gpu;
}

json feed_stats_json(const FeedStats& stats, int rank) {
  return {{"rank", rank},          {"role", "data"},           {"batches", stats.batches},
          {"bytes", stats.bytes},  {"read_seconds", stats.read_s}, {"collate_seconds", stats.collate_s},
          {"send_wait_seconds", stats.wait_s}, {"device_seconds", stats.device_s}, {"wall_seconds", stats.wall_s}};
}

double host_copy_bandwidth(size_t bytes) {
  std::vector<char> from(std::max<size_t>(1, bytes), 1), to(from.size());
  double best = 1e300;
  for (int i = 0; i < 5; ++i) {
    const auto begin = Clock::now();
    std::memcpy(to.data(), from.data(), from.size());
    best = std::min(best, seconds_since(begin));
  }
  return static_cast<double>(from.size()) / std::max(best, 1e-9);
}

}  // namespace sluice::runtime
