#include "bench/measure/transport_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include <mpi.h>

#include "common/clock.h"
#include "bench/measure/transport_bench_support.h"
#include "common/mpi_session.h"
#include "runtime/transport/gpu_facts.h"
#include "runtime/transport/inproc_channel.h"
#include "runtime/transport/mpi_channel.h"

namespace sluice::benchmark {
namespace {



}  // namespace

namespace detail {

int iterations(double bytes_per_point, size_t bytes) {
  const double n = bytes_per_point / static_cast<double>(bytes);
  return static_cast<int>(std::clamp(n, 20.0, 5000.0));
}

int warmup(int iterations) { return std::max(3, iterations / 10); }

transport::ChannelOptions channel_options(const TransportBenchOptions& settings, size_t bytes, int channel_id) {
  transport::ChannelOptions options;
  options.name = "bench " + std::to_string(bytes);
  options.slots = settings.slots;
  options.slot_bytes = bytes;
  options.timeout_s = 60;
  options.channel_id = channel_id;
  return options;
}

double time_channel_pair(transport::ChannelPair pair, const void* data, size_t bytes, int n) {
  const int total = warmup(n) + n;
  std::exception_ptr data_error;
  std::thread data_thread([&] {
    try {
      for (int i = 0; i < total; ++i) pair.sender->send(data, bytes);
      pair.sender->close();
    } catch (...) {
      data_error = std::current_exception();
    }
  });
  Clock::time_point start;
  try {
    for (int i = 0; i < total; ++i) {
      if (i == warmup(n)) start = Clock::now();
      auto batch = pair.receiver->receive();
      pair.receiver->release(*batch);
    }
  } catch (...) {
    // Destroying the receiver wakes a sender waiting for a credit (peer aborted). The sender's
    // own error says more than "peer aborted": prefer it.
    pair.receiver.reset();
    data_thread.join();
    if (data_error) std::rethrow_exception(data_error);
    throw;
  }
  const double per_batch = seconds_since(start) / n;
  data_thread.join();
  if (data_error) std::rethrow_exception(data_error);
  return per_batch;
}

double time_rank_pair(const MpiSession& session,
                      const std::function<std::unique_ptr<transport::SendChannel>()>& make_sender,
                      const std::function<std::unique_ptr<transport::ReceiveChannel>()>& make_receiver,
                      const void* data, size_t bytes, int n, int result_tag) {
  const int total = warmup(n) + n;
  if (session.rank() == 0) {
    auto sender = make_sender();
    for (int i = 0; i < total; ++i) sender->send(data, bytes);
    sender->close();
    sender.reset();
    return std::stod(receive_string(session, 1, result_tag, deadline_after(120), "the receiver's timing"));
  }
  auto receiver = make_receiver();
  Clock::time_point start;
  for (int i = 0; i < total; ++i) {
    if (i == warmup(n)) start = Clock::now();
    auto batch = receiver->receive();
    receiver->release(*batch);
  }
  const double per_batch = seconds_since(start) / n;
  receiver->close();
  receiver.reset();
  send_string(session, 0, result_tag, std::to_string(per_batch), deadline_after(120), "the receiver's timing");
  return per_batch;
}

void start_two_rank_part(const MpiSession& session, int tag) {
  if (session.rank() == 0) {
    send_string(session, 1, tag, "go", deadline_after(120), "the go signal");
  } else {
    receive_string(session, 0, tag, deadline_after(600), "the go signal");
  }
}

std::string human(size_t bytes) {
  char text[32];
  if (bytes >= (1u << 20)) std::snprintf(text, sizeof(text), "%zuM", bytes >> 20);
  else std::snprintf(text, sizeof(text), "%zuK", bytes >> 10);
  return text;
}

}  // namespace detail

namespace {

using detail::warmup;
using Settings = TransportBenchOptions;

// Seconds per batch of a host memcpy into a warm destination.
double time_memcpy(const std::vector<char>& source, std::vector<char>& destination, int n) {
  for (int i = 0; i < warmup(n); ++i) std::memcpy(destination.data(), source.data(), source.size());
  const auto start = Clock::now();
  for (int i = 0; i < n; ++i) {
    std::memcpy(destination.data(), source.data(), source.size());
    // Keeps the compiler from merging the copies.
    asm volatile("" : : "r"(destination.data()) : "memory");
  }
  return seconds_since(start) / n;
}

double time_inproc(const Settings& settings, const std::vector<char>& source, int n) {
  return detail::time_channel_pair(transport::make_inproc_channel_pair(detail::channel_options(settings, source.size(), 0)),
                                   source.data(), source.size(), n);
}

// Both ranks call it; the receiver's time per batch (rank 1) is returned on both.
double time_mpi(const sluice::MpiSession& session, const Settings& settings, const std::vector<char>& source, int n,
                int channel_id) {
  const transport::ChannelOptions options = detail::channel_options(settings, source.size(), channel_id);
  return detail::time_rank_pair(
      session, [&] { return transport::make_mpi_send_channel(session, 1, options); },
      [&] { return transport::make_mpi_receive_channel(session, 0, options); }, source.data(), source.size(), n,
      0x2c00);
}

// Between polls of the raw MPI loop: yield (as the transport does while bytes move, so that on a
// small shared machine the two ranks do not starve each other), and give up at the deadline.
void wait_a_little(const sluice::MpiSession& session, sluice::Deadline deadline) {
  if (Clock::now() > deadline) {
    std::fprintf(stderr, "bench_transport: the raw MPI exchange stalled for 120 s; aborting\n");
    session.abort(1);
  }
  std::this_thread::yield();
}

// Plain MPI with a window of `slots` messages in flight (rank 0 sends, rank 1 receives into
// rotating buffers); the receiver's seconds per message, returned on rank 0.
double time_raw_mpi(const sluice::MpiSession& session, int slots, size_t bytes, int n) {
  const int tag = 0x2b00;  // tags of this file: below the feed's range (0x4000..0x7fff)
  std::vector<char> buffers(bytes * static_cast<size_t>(slots), 1);
  std::vector<MPI_Request> requests(static_cast<size_t>(slots), MPI_REQUEST_NULL);
  const int total = warmup(n) + n;
  const sluice::Deadline deadline = sluice::deadline_after(120);
  Clock::time_point start;
  for (int i = 0; i < total; ++i) {
    if (i == warmup(n)) start = Clock::now();
    MPI_Request& request = requests[static_cast<size_t>(i % slots)];
    for (int done = 0; !done;) {
      sluice::check_mpi(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test(raw mpi)");
      if (!done) wait_a_little(session, deadline);
    }
    char* buffer = buffers.data() + static_cast<size_t>(i % slots) * bytes;
    if (session.rank() == 0) {
      sluice::check_mpi(MPI_Isend(buffer, static_cast<int>(bytes), MPI_BYTE, 1, tag, session.world(), &request),
                        "MPI_Isend(raw mpi)");
    } else {
      sluice::check_mpi(MPI_Irecv(buffer, static_cast<int>(bytes), MPI_BYTE, 0, tag, session.world(), &request),
                        "MPI_Irecv(raw mpi)");
    }
  }
  for (int done = 0; !done;) {
    sluice::check_mpi(MPI_Testall(slots, requests.data(), &done, MPI_STATUSES_IGNORE), "MPI_Testall(raw mpi)");
    if (!done) wait_a_little(session, deadline);
  }
  const double per_message = seconds_since(start) / n;
  const int result_tag = 0x2a00;
  if (session.rank() == 1) {
    sluice::send_string(session, 0, result_tag, std::to_string(per_message), sluice::deadline_after(120), "the timing");
    return per_message;
  }
  return std::stod(sluice::receive_string(session, 1, result_tag, sluice::deadline_after(120), "the raw mpi timing"));
}

// Why this rank cannot measure the GPU table ("" when it can).
std::string local_gpu_problem(const MpiSession& session) {
  const transport::GpuEnvironment env = transport::gpu_environment();
  if (!env.cuda_compiled) return env.problem;
  if (!env.gpus.empty()) return "";
  return "no CUDA device visible on " + session.describe(session.rank()) + ": " +
         (env.problem.empty() ? std::string("the CUDA runtime counts 0 devices") : env.problem) +
         " (run on a GPU node; check CUDA_VISIBLE_DEVICES)";
}

// Why the GPU table is not measured ("" when it is): the same verdict on every rank.
std::string gpu_skip_reason(const MpiSession& session, GpuColumns gpu) {
  if (gpu == GpuColumns::off) return "--gpu off";
  const std::string local = local_gpu_problem(session);
  if (session.size() == 1) return local;
  const std::vector<std::string> problems = gather_strings(session, local, 0x2e00, 120, "whether the ranks see a GPU");
  std::string verdict;
  for (const std::string& problem : problems) {
    if (verdict.empty()) verdict = problem;
  }
  return broadcast_string(session, verdict, 0x2e01, 120, "whether to measure the GPU table");
}

}  // namespace

size_t parse_bytes(const std::string& text) {
  char* end = nullptr;
  double value = std::strtod(text.c_str(), &end);
  const std::string unit = end ? end : "";
  if (unit == "K" || unit == "KiB") value *= 1024;
  if (unit == "M" || unit == "MiB") value *= 1024 * 1024;
  if (unit == "G" || unit == "GiB") value *= 1024.0 * 1024 * 1024;
  return static_cast<size_t>(value);
}

std::optional<GpuColumns> parse_gpu_columns(const std::string& text) {
  if (text == "auto") return GpuColumns::automatic;
  if (text == "on") return GpuColumns::on;
  if (text == "off") return GpuColumns::off;
  return std::nullopt;
}

int run_transport_bench(const MpiSession& session, const TransportBenchOptions& settings) {
  const bool with_mpi = session.size() == 2;
  if (session.size() > 2) {
    if (session.rank() == 0) std::fprintf(stderr, "bench_transport: run on 1 or 2 ranks\n");
    return 2;
  }
  if (session.rank() == 0) {
    const char* single_copy = std::getenv("OMPI_MCA_btl_vader_single_copy_mechanism");
    std::printf("# bench_transport: %d slots, %d ranks, host %s, vader single copy: %s, best of %d rounds\n",
                settings.slots, session.size(), session.host().c_str(), single_copy ? single_copy : "(default)",
                settings.rounds);
    std::printf("# ratio = GB/s / memcpy GB/s (same size, same run); GB/s = 1e9 B/s; us = time per batch\n");
    std::printf("#%9s %6s  %9s %7s  %9s %7s %6s  %9s %7s %6s  %9s %7s %6s\n", "size", "count", "memcpy_us", "GB/s",
                "inproc_us", "GB/s", "ratio", "mpi_us", "GB/s", "ratio", "raw_us", "GB/s", "ratio");
  }
  // Channel ids (hence MPI tags) are never reused within a process, across calls too: a closed
  // channel may leave its receiver's unmatched shutdown message under its tags.
  static int next_channel_id = 0;
  int& channel_id = next_channel_id;
  for (size_t bytes = settings.min_bytes; bytes <= settings.max_bytes; bytes *= 2) {
    const int n = detail::iterations(settings.bytes_per_point, bytes);
    std::vector<char> source(bytes);
    for (size_t i = 0; i < bytes; ++i) source[i] = static_cast<char>(i * 31);
    double memcpy_s = 1e30, inproc_s = 1e30, mpi_s = 1e30, raw_s = 1e30;
    std::vector<char> destination(session.rank() == 0 ? bytes : 0, 1);
    for (int round = 0; round < settings.rounds; ++round) {
      if (session.rank() == 0) {
        // The baseline before and after: freshly mapped memory and a busy machine both make a
        // single measurement read low.
        memcpy_s = std::min(memcpy_s, time_memcpy(source, destination, n));
        inproc_s = std::min(inproc_s, time_inproc(settings, source, n));
        memcpy_s = std::min(memcpy_s, time_memcpy(source, destination, n));
      }
      if (!with_mpi) continue;
      // Rank 1 waits (sleeping poll) while rank 0 measures alone, then both run the MPI parts.
      detail::start_two_rank_part(session, 0x2d00 + channel_id % 256);
      mpi_s = std::min(mpi_s, time_mpi(session, settings, source, n, channel_id++ % 2048));
      raw_s = std::min(raw_s, time_raw_mpi(session, settings.slots, bytes, n));
    }
    if (session.rank() != 0) continue;
    const double size = static_cast<double>(bytes);
    const double memcpy_gbs = size / memcpy_s / 1e9;
    const double inproc_gbs = size / inproc_s / 1e9;
    std::printf(" %9s %6d  %9.1f %7.2f  %9.1f %7.2f %6.2f", detail::human(bytes).c_str(), n, memcpy_s * 1e6, memcpy_gbs,
                inproc_s * 1e6, inproc_gbs, inproc_gbs / memcpy_gbs);
    if (with_mpi) {
      const double mpi_gbs = size / mpi_s / 1e9;
      const double raw_gbs = size / raw_s / 1e9;
      std::printf("  %9.1f %7.2f %6.2f  %9.1f %7.2f %6.2f\n", mpi_s * 1e6, mpi_gbs, mpi_gbs / memcpy_gbs, raw_s * 1e6,
                  raw_gbs, raw_gbs / memcpy_gbs);
    } else {
      std::printf("  %9s %7s %6s  %9s %7s %6s\n", "-", "-", "-", "-", "-", "-");
    }
    std::fflush(stdout);
  }
  const std::string skip = gpu_skip_reason(session, settings.gpu);
  if (!skip.empty()) {
    if (session.rank() == 0) {
      std::printf("# GPU columns skipped: %s\n", skip.c_str());
      std::fflush(stdout);
    }
    return settings.gpu == GpuColumns::on ? 1 : 0;
  }
#if SLUICE_HAVE_CUDA
  detail::run_gpu_table(session, settings, channel_id);
#endif
  return 0;
}

}  // namespace sluice::benchmark
