// The data side of `sluice train` on a real cache written by the cache library: every planned
// batch arrives once, in plan order, across an epoch boundary; the batch work's host hook changes
// what is sent and its to_send() replaces what is sent; and every batch lives in the memory
// resource the feeder is given (pinned memory on a GPU data rank; a counting resource here), none
// on the default heap.
#include <atomic>
#include <memory_resource>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "cache/cache_reader.h"
#include "cache_test_util.h"
#include "common/error.h"
#include "runtime/train/batch_buffer.h"
#include "runtime/train/batch_feeder.h"
#include "runtime/transport/feed_factory.h"

namespace sluice::runtime {
namespace {

// Forwards to the heap and counts: a real resource, so that the test sees where batches live.
class CountingResource final : public std::pmr::memory_resource {
 public:
  std::atomic<int64_t> allocations{0}, live_bytes{0};

 private:
  void* do_allocate(size_t bytes, size_t alignment) override {
    ++allocations;
    live_bytes += static_cast<int64_t>(bytes);
    return std::pmr::new_delete_resource()->allocate(bytes, alignment);
  }
  void do_deallocate(void* pointer, size_t bytes, size_t alignment) override {
    live_bytes -= static_cast<int64_t>(bytes);
    std::pmr::new_delete_resource()->deallocate(pointer, bytes, alignment);
  }
  bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override { return this == &other; }
};

// Marks each batch with its global step in the reader threads (host work), and sends every
// other batch from a copy of its own (as a GPU data rank sends its upload).
class MarkingWork final : public BatchWork {
 public:
  std::atomic<int64_t> to_send_calls{0}, moved{0};

  void on_collated(BatchBytes& bytes, int64_t global) override {
    const BatchPointers batch = BatchPointers::of(bytes.data(), bytes.size());
    const_cast<float*>(batch.mels)[0] = 1000.0f + static_cast<float>(global);
  }
  const void* to_send(const BatchBytes& bytes, int64_t global, int) override {
    ++to_send_calls;
    if (global % 2 == 0) return nullptr;  // the host bytes as they are
    copy_.assign(bytes.begin(), bytes.end());
    const_cast<float*>(BatchPointers::of(copy_.data(), copy_.size()).mels)[0] += 0.5f;  // sent from here
    ++moved;
    return copy_.data();
  }

 private:
  std::vector<std::byte> copy_;  // the channel copies before send() returns
};

struct Received {
  int64_t epoch, step;
  std::vector<int64_t> indices;
  float first_mel;
};

TEST(BatchFeeder, EveryPlannedBatchOnceInOrderFromTheGivenMemory) {
  cache::testing::ScratchDir dir;
  cache::testing::build_cache(dir.path(), 2, 20, 16);
  auto reader = cache::CacheReader::open(dir.path());
  std::vector<PlanSample> train;
  for (size_t i = 0; i < reader.entries().size(); ++i) {
    train.push_back({static_cast<int64_t>(i), reader.entries()[i].n_frames, reader.entries()[i].n_tokens});
  }
  BatchPlanConfig config;
  config.n_buckets = 2;
  config.batch_size = 3;
  const PlanSchedule schedule(train, config, 1);
  const int64_t steps = schedule.steps_per_epoch() + 3;  // into the second epoch

  CountingResource batches, heap;
  std::pmr::memory_resource* previous_default = std::pmr::set_default_resource(&heap);
  FeedOptions options;
  options.reader_threads = 2;
  options.read_ahead = 2;
  options.batch_memory = &batches;
  MarkingWork work;
  options.work = &work;

  transport::ChannelOptions channel;
  channel.slots = 2;
  channel.slot_bytes = max_batch_bytes(*schedule.epoch(0), reader.n_mels());
  channel.timeout_s = 30;
  auto pair = transport::make_channel_pair("inproc", -1, channel);
  std::vector<Received> received;
  std::thread model([&] {
    while (auto batch = pair.receiver->receive()) {
      const BatchPointers view = BatchPointers::of(batch->data, batch->bytes);
      received.push_back({view.header->epoch, view.header->step,
                          std::vector<int64_t>(view.indices, view.indices + view.header->batch_size), view.mels[0]});
      pair.receiver->release(*batch);
    }
  });
  BatchFeeder feeder(reader, schedule, options);
  const FeedStats stats = feeder.run(0, steps, {{0, pair.sender.get(), -1}});
  model.join();
  std::pmr::set_default_resource(previous_default);

  EXPECT_EQ(stats.batches, steps);
  EXPECT_EQ(work.to_send_calls.load(), steps);
  EXPECT_EQ(work.moved.load(), steps / 2);
  EXPECT_GT(stats.device_s, 0.0);  // the moved batches' time in to_send
  ASSERT_EQ(static_cast<int64_t>(received.size()), steps);
  for (int64_t global = 0; global < steps; ++global) {
    const Received& got = received[static_cast<size_t>(global)];
    const PlanPosition at = schedule.position(global);
    EXPECT_EQ(got.epoch, at.epoch);
    EXPECT_EQ(got.step, at.step);
    EXPECT_EQ(got.indices, schedule.epoch(at.epoch)->batch(at.step, 0).samples) << "global step " << global;
    EXPECT_EQ(got.first_mel, 1000.0f + static_cast<float>(global) + (global % 2 == 0 ? 0.0f : 0.5f));
  }
  EXPECT_GE(batches.allocations.load(), steps);  // one buffer per collated batch
  EXPECT_EQ(batches.live_bytes.load(), 0);       // and every one given back
  EXPECT_EQ(heap.allocations.load(), 0) << "a batch was allocated outside FeedOptions::batch_memory";
}

// The train job makes its channels by the role plan's transport name: a name that cannot join the
// two ends asked for is a ConfigError naming it, not a silent fallback to another transport.
TEST(FeedFactory, PicksByNameAndRefusesANameThatCannotJoinTheEnds) {
  transport::ChannelOptions options;
  options.slot_bytes = 64;
  options.timeout_s = 5;
  auto pair = transport::make_channel_pair("inproc", -1, options);
  const char bytes[3] = {1, 2, 3};
  pair.sender->send(bytes, sizeof(bytes));
  const auto received = pair.receiver->receive();
  ASSERT_TRUE(received.has_value());
  EXPECT_EQ(received->bytes, sizeof(bytes));
  EXPECT_EQ(static_cast<const char*>(received->data)[2], 3);
  try {
    transport::make_channel_pair("mpi", -1, options);
    FAIL() << "mpi cannot join two threads of one process";
  } catch (const ConfigError& error) {
    EXPECT_NE(std::string(error.what()).find("'mpi'"), std::string::npos) << error.what();
  }
  EXPECT_TRUE(transport::moves_device_memory("nccl"));
  EXPECT_TRUE(transport::moves_device_memory("cuda_ipc"));
  EXPECT_FALSE(transport::moves_device_memory("mpi"));
  EXPECT_FALSE(transport::moves_device_memory("inproc"));
}

}  // namespace
}  // namespace sluice::runtime
