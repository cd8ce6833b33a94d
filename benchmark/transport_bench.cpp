#include "benchmark/transport_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <mpi.h>

#include "common/mpi_session.h"
#include "runtime/transport/inproc_channel.h"
#include "runtime/transport/mpi_channel.h"

namespace sluice::benchmark {
namespace {

using sluice::transport::ChannelOptions;
using Clock = std::chrono::steady_clock;

using Settings = TransportBenchOptions;

int iterations(const Settings& settings, size_t bytes) {
  const double n = settings.bytes_per_point / static_cast<double>(bytes);
  return static_cast<int>(std::clamp(n, 20.0, 5000.0));
}

int warmup(int iterations) { return std::max(3, iterations / 10); }

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

ChannelOptions options_for(const Settings& settings, size_t bytes, int channel_id) {
  ChannelOptions options;
  options.name = "bench " + std::to_string(bytes);
  options.slots = settings.slots;
  options.slot_bytes = bytes;
  options.timeout_s = 60;
  options.channel_id = channel_id;
  return options;
}

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
  auto pair = sluice::transport::make_inproc_channel_pair(options_for(settings, source.size(), 0));
  const int total = warmup(n) + n;
  std::thread data_thread([&] {
    for (int i = 0; i < total; ++i) pair.sender->send(source.data(), source.size());
    pair.sender->close();
  });
  Clock::time_point start;
  for (int i = 0; i < total; ++i) {
    if (i == warmup(n)) start = Clock::now();
    auto batch = pair.receiver->receive();
    pair.receiver->release(*batch);
  }
  const double per_batch = seconds_since(start) / n;
  data_thread.join();
  return per_batch;
}

// Both ranks call it; the receiver's time per batch (rank 1) is returned on rank 0.
double time_mpi(const sluice::MpiSession& session, const Settings& settings, const std::vector<char>& source, int n,
                int channel_id) {
  const ChannelOptions options = options_for(settings, source.size(), channel_id);
  const int total = warmup(n) + n;
  const int result_tag = 0x2c00;
  if (session.rank() == 0) {
    auto sender = sluice::transport::make_mpi_send_channel(session, 1, options);
    for (int i = 0; i < total; ++i) sender->send(source.data(), source.size());
    sender->close();
    return std::stod(sluice::receive_string(session, 1, result_tag, sluice::deadline_after(120), "the mpi timing"));
  }
  auto receiver = sluice::transport::make_mpi_receive_channel(session, 0, options);
  Clock::time_point start;
  for (int i = 0; i < total; ++i) {
    if (i == warmup(n)) start = Clock::now();
    auto batch = receiver->receive();
    receiver->release(*batch);
  }
  const double per_batch = seconds_since(start) / n;
  receiver->close();
  sluice::send_string(session, 0, result_tag, std::to_string(per_batch), sluice::deadline_after(120), "the mpi timing");
  return per_batch;
}

// Between polls of the raw MPI loop: yield (as the transport does while bytes move, so that on a
// small shared machine the two ranks do not starve each other), and give up at the deadline.
void wait_a_little(sluice::Deadline deadline) {
  if (Clock::now() > deadline) {
    std::fprintf(stderr, "bench_transport: the raw MPI exchange stalled for 120 s; aborting\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
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
      MPI_Test(&request, &done, MPI_STATUS_IGNORE);
      if (!done) wait_a_little(deadline);
    }
    char* buffer = buffers.data() + static_cast<size_t>(i % slots) * bytes;
    if (session.rank() == 0) {
      MPI_Isend(buffer, static_cast<int>(bytes), MPI_BYTE, 1, tag, session.world(), &request);
    } else {
      MPI_Irecv(buffer, static_cast<int>(bytes), MPI_BYTE, 0, tag, session.world(), &request);
    }
  }
  for (int done = 0; !done;) {
    MPI_Testall(slots, requests.data(), &done, MPI_STATUSES_IGNORE);
    if (!done) wait_a_little(deadline);
  }
  const double per_message = seconds_since(start) / n;
  const int result_tag = 0x2a00;
  if (session.rank() == 1) {
    sluice::send_string(session, 0, result_tag, std::to_string(per_message), sluice::deadline_after(120), "the timing");
    return per_message;
  }
  return std::stod(sluice::receive_string(session, 1, result_tag, sluice::deadline_after(120), "the raw mpi timing"));
}

std::string human(size_t bytes) {
  char text[32];
  if (bytes >= (1u << 20)) std::snprintf(text, sizeof(text), "%zuM", bytes >> 20);
  else std::snprintf(text, sizeof(text), "%zuK", bytes >> 10);
  return text;
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
  int channel_id = 0;
  for (size_t bytes = settings.min_bytes; bytes <= settings.max_bytes; bytes *= 2) {
    const int n = iterations(settings, bytes);
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
      const int tag = 0x2d00 + channel_id % 256;
      if (session.rank() == 0) {
        sluice::send_string(session, 1, tag, "go", sluice::deadline_after(120), "the go signal");
      } else {
        sluice::receive_string(session, 0, tag, sluice::deadline_after(600), "the go signal");
      }
      mpi_s = std::min(mpi_s, time_mpi(session, settings, source, n, channel_id++ % 2048));
      raw_s = std::min(raw_s, time_raw_mpi(session, settings.slots, bytes, n));
    }
    if (session.rank() != 0) continue;
    const double size = static_cast<double>(bytes);
    const double memcpy_gbs = size / memcpy_s / 1e9;
    const double inproc_gbs = size / inproc_s / 1e9;
    std::printf(" %9s %6d  %9.1f %7.2f  %9.1f %7.2f %6.2f", human(bytes).c_str(), n, memcpy_s * 1e6, memcpy_gbs,
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
  return 0;
}

}  // namespace sluice::benchmark
