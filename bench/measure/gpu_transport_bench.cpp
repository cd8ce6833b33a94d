// The GPU table of the transport benchmark (transport_bench.h): the GPU transports against the
// device's own copy engines and NCCL, measured in the same run. Compiled only when the build has
// CUDA (SLUICE_HAVE_CUDA, bench/measure/CMakeLists.txt); CUDA and NCCL stay private to this file, and
// their return codes become errors in the transport's layer (runtime/transport/cuda_check.h).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bench/measure/transport_bench_support.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "common/mpi_session.h"
#include "runtime/transport/cuda_check.h"
#include "runtime/transport/cuda_ipc_channel.h"
#include "runtime/transport/gpu_facts.h"
#include "runtime/transport/nccl_channel.h"

namespace sluice::benchmark::detail {
namespace {

void warn_on_error(cudaError_t code, const char* what) {
  if (code != cudaSuccess) log::get("benchmark")->warn("{}: {}", what, cudaGetErrorString(code));
}

// Device memory on the current device; freed (never throwing) on destruction.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) { SLUICE_CUDA_CHECK(cudaMalloc(&data_, std::max<size_t>(bytes, 1))); }
  ~DeviceBuffer() { warn_on_error(cudaFree(data_), "cudaFree"); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return data_; }

 private:
  void* data_ = nullptr;
};

// A non-blocking stream on the current device.
class Stream {
 public:
  Stream() { SLUICE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
  ~Stream() { warn_on_error(cudaStreamDestroy(stream_), "cudaStreamDestroy"); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

// Seconds per copy of `bytes` device to device on one GPU, n copies back to back on `stream`,
// timed from the first launch to the stream's end (the host clock, as the transport columns).
double time_d2d(cudaStream_t stream, void* destination, const void* source, size_t bytes, int n) {
  for (int i = 0; i < warmup(n); ++i) {
    SLUICE_CUDA_CHECK(cudaMemcpyAsync(destination, source, bytes, cudaMemcpyDeviceToDevice, stream));
  }
  SLUICE_CUDA_CHECK(cudaStreamSynchronize(stream));
  const auto start = Clock::now();
  for (int i = 0; i < n; ++i) {
    SLUICE_CUDA_CHECK(cudaMemcpyAsync(destination, source, bytes, cudaMemcpyDeviceToDevice, stream));
  }
  SLUICE_CUDA_CHECK(cudaStreamSynchronize(stream));
  return seconds_since(start) / n;
}

#if SLUICE_HAVE_NCCL
// A blocking one-rank communicator on the current device (one rank cannot wait for a peer).
class SelfComm {
 public:
  SelfComm() {
    ncclUniqueId id;
    SLUICE_NCCL_CHECK(ncclGetUniqueId(&id), nullptr);
    SLUICE_NCCL_CHECK(ncclCommInitRank(&comm_, 1, id, 0), nullptr);
  }
  ~SelfComm() {
    const ncclResult_t result = ncclCommDestroy(comm_);
    if (result != ncclSuccess) log::get("benchmark")->warn("ncclCommDestroy: {}", ncclGetErrorString(result));
  }
  SelfComm(const SelfComm&) = delete;
  SelfComm& operator=(const SelfComm&) = delete;
  ncclComm_t get() const { return comm_; }

 private:
  ncclComm_t comm_ = nullptr;
};

// One batch sent by rank 0 of a one-rank communicator to itself: ncclSend and ncclRecv in one
// group (NCCL's rule for send-to-self), the same calls the nccl loopback transport makes.
void send_to_self(const SelfComm& comm, cudaStream_t stream, void* destination, const void* source, size_t bytes) {
  SLUICE_NCCL_CHECK(ncclGroupStart(), nullptr);
  SLUICE_NCCL_CHECK(ncclSend(source, bytes, ncclUint8, 0, comm.get(), stream), comm.get());
  SLUICE_NCCL_CHECK(ncclRecv(destination, bytes, ncclUint8, 0, comm.get(), stream), comm.get());
  SLUICE_NCCL_CHECK(ncclGroupEnd(), nullptr);
}

// Seconds per raw send-to-self of `bytes`, n back to back (nccl-tests' sendrecv on one rank).
double time_nccl_self(const SelfComm& comm, cudaStream_t stream, void* destination, const void* source, size_t bytes,
                      int n) {
  for (int i = 0; i < warmup(n); ++i) send_to_self(comm, stream, destination, source, bytes);
  SLUICE_CUDA_CHECK(cudaStreamSynchronize(stream));
  const auto start = Clock::now();
  for (int i = 0; i < n; ++i) send_to_self(comm, stream, destination, source, bytes);
  SLUICE_CUDA_CHECK(cudaStreamSynchronize(stream));
  return seconds_since(start) / n;
}
#endif

// "rank 0 on CUDA device 0 (NVIDIA H100 80GB HBM3, 0000:3B:00.0)"
std::string describe_device(const MpiSession& session, const transport::GpuEnvironment& env, int device) {
  std::string text = "rank " + std::to_string(session.rank()) + " on CUDA device " + std::to_string(device);
  for (const transport::GpuFacts& gpu : env.gpus) {
    if (gpu.index == device) text += " (" + gpu.name + ", " + gpu.pci_bus_id + ")";
  }
  return text;
}

double gbs(size_t bytes, double seconds) { return static_cast<double>(bytes) / seconds / 1e9; }

// Which device each rank measures on, the versions, and the column heads (rank 0 prints; with
// two ranks both take part in gathering the devices).
void print_gpu_table_header(const MpiSession& session, const transport::GpuEnvironment& env, int device,
                            bool two_ranks, bool nccl) {
  std::vector<std::string> devices{describe_device(session, env, device)};
  if (two_ranks) devices = gather_strings(session, devices[0], 0x2e02, 120, "the ranks' CUDA devices");
  if (session.rank() == 0) {
    std::string placement;
    for (const std::string& text : devices) placement += (placement.empty() ? "" : "; ") + text;
    std::printf("# GPU table: %s; CUDA runtime %s, driver %s, NCCL %s\n", placement.c_str(),
                env.runtime_version.c_str(), env.driver_version.empty() ? "?" : env.driver_version.c_str(),
                nccl ? env.nccl_version.c_str() : "not in this build");
    std::printf("# ratio = nccl GB/s / nccl_self GB/s and cuda_ipc GB/s / d2d GB/s (same size, same run); device "
                "memory on both ends; GB/s = 1e9 B/s, bytes counted once\n");
    if (!nccl) std::printf("# nccl_self and nccl skipped: this build has no NCCL (CMake found none beside CUDA)\n");
    if (!two_ranks) std::printf("# cuda_ipc skipped: it needs 2 ranks (mpirun -np 2)\n");
    std::printf("#%9s %6s  %9s %7s  %12s %7s  %9s %7s %6s  %11s %7s %6s\n", "size", "count", "d2d_us", "GB/s",
                "nccl_self_us", "GB/s", "nccl_us", "GB/s", "ratio", "cuda_ipc_us", "GB/s", "ratio");
    std::fflush(stdout);
  }
}

// One row: each column's time per batch and GB/s, and the ratios to the device's own copies.
void print_gpu_row(size_t bytes, int n, double d2d_s, double self_s, double nccl_s, double ipc_s, bool nccl,
                   bool two_ranks) {
  const double d2d_gbs = gbs(bytes, d2d_s);
  std::printf(" %9s %6d  %9.1f %7.1f", human(bytes).c_str(), n, d2d_s * 1e6, d2d_gbs);
  if (nccl) {
    const double self_gbs = gbs(bytes, self_s);
    const double nccl_gbs = gbs(bytes, nccl_s);
    std::printf("  %12.1f %7.1f  %9.1f %7.1f %6.2f", self_s * 1e6, self_gbs, nccl_s * 1e6, nccl_gbs,
                nccl_gbs / self_gbs);
  } else {
    std::printf("  %12s %7s  %9s %7s %6s", "-", "-", "-", "-", "-");
  }
  if (two_ranks) {
    const double ipc_gbs = gbs(bytes, ipc_s);
    std::printf("  %11.1f %7.1f %6.2f\n", ipc_s * 1e6, ipc_gbs, ipc_gbs / d2d_gbs);
  } else {
    std::printf("  %11s %7s %6s\n", "-", "-", "-");
  }
  std::fflush(stdout);
}

}  // namespace

void run_gpu_table(const MpiSession& session, const TransportBenchOptions& settings, int& channel_id) {
  const transport::GpuEnvironment env = transport::gpu_environment();
  const int device = session.local_rank() % static_cast<int>(env.gpus.size());
  SLUICE_CUDA_CHECK(cudaSetDevice(device));
  const bool two_ranks = session.size() == 2;
  const bool nccl = SLUICE_HAVE_NCCL != 0;

  print_gpu_table_header(session, env, device, two_ranks, nccl);

  // Rank 0's device buffers and stream, and its one-rank communicator (made once: NCCL's set-up
  // takes far longer than a measurement).
  std::unique_ptr<Stream> stream;
#if SLUICE_HAVE_NCCL
  std::unique_ptr<SelfComm> self_comm;
#endif
  if (session.rank() == 0) {
    stream = std::make_unique<Stream>();
#if SLUICE_HAVE_NCCL
    self_comm = std::make_unique<SelfComm>();
#endif
  }

  for (size_t bytes = settings.min_bytes; bytes <= settings.max_bytes; bytes *= 2) {
    const int n = iterations(settings.gpu_bytes_per_point, bytes);
    std::unique_ptr<DeviceBuffer> source, destination;
    if (session.rank() == 0) {
      source = std::make_unique<DeviceBuffer>(bytes);
      destination = std::make_unique<DeviceBuffer>(bytes);
      SLUICE_CUDA_CHECK(cudaMemset(source->get(), 0x5a, bytes));
      SLUICE_CUDA_CHECK(cudaMemset(destination->get(), 0, bytes));
      // The streams below do not wait for the legacy default stream; the transports read
      // `source` on their own streams and expect its writes to be complete.
      SLUICE_CUDA_CHECK(cudaDeviceSynchronize());
    }
    double d2d_s = 1e30, self_s = 1e30, nccl_s = 1e30, ipc_s = 1e30;
    for (int round = 0; round < settings.rounds; ++round) {
      if (session.rank() == 0) {
        // The baseline before and after, as the host table does with memcpy.
        d2d_s = std::min(d2d_s, time_d2d(stream->get(), destination->get(), source->get(), bytes, n));
#if SLUICE_HAVE_NCCL
        self_s = std::min(self_s, time_nccl_self(*self_comm, stream->get(), destination->get(), source->get(), bytes, n));
        nccl_s = std::min(nccl_s, time_channel_pair(transport::make_nccl_loopback_channel_pair(
                                                        device, channel_options(settings, bytes, 0)),
                                                    source->get(), bytes, n));
#endif
        d2d_s = std::min(d2d_s, time_d2d(stream->get(), destination->get(), source->get(), bytes, n));
      }
      if (!two_ranks) continue;
      start_two_rank_part(session, 0x2d00 + channel_id % 256);
      const transport::ChannelOptions options = channel_options(settings, bytes, channel_id++ % 2048);
      ipc_s = std::min(
          ipc_s, time_rank_pair(
                     session, [&] { return transport::make_cuda_ipc_send_channel(session, 1, device, options); },
                     [&] { return transport::make_cuda_ipc_receive_channel(session, 0, device, options); },
                     source ? source->get() : nullptr, bytes, n, 0x2c01));
    }
    if (session.rank() != 0) continue;
    print_gpu_row(bytes, n, d2d_s, self_s, nccl_s, ipc_s, nccl, two_ranks);
  }
}

}  // namespace sluice::benchmark::detail
