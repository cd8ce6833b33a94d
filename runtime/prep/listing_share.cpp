#include "runtime/prep/listing_share.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/log.h"
#include "common/poll_backoff.h"
#include "dataset/listing_encoding.h"

namespace sluice::runtime {
namespace {

std::shared_ptr<spdlog::logger> logger() { return log::get("runtime"); }

enum class State : int64_t { reading = 0, listing = 1, error = 2 };

// The header every broadcast of this protocol begins with (see listing_share.h).
struct Header {
  std::array<int64_t, 2> words{};  // state, payload bytes
  State state() const { return static_cast<State>(words[0]); }
  size_t bytes() const { return static_cast<size_t>(words[1]); }
};

// One posted MPI_Ibcast and the buffer it owns until it completes (a header; chunks point into the
// payload, which outlives them).
struct Broadcast {
  std::unique_ptr<Header> header;
  MPI_Request request = MPI_REQUEST_NULL;
};

Broadcast post_header(const MpiSession& session, State state, size_t bytes) {
  Broadcast broadcast{std::make_unique<Header>(), MPI_REQUEST_NULL};
  broadcast.header->words = {static_cast<int64_t>(state), static_cast<int64_t>(bytes)};
  check_mpi(MPI_Ibcast(broadcast.header->words.data(), 2, MPI_INT64_T, 0, session.world(), &broadcast.request),
            "MPI_Ibcast(the corpus listing's header)");
  return broadcast;
}

bool complete(MPI_Request& request) {
  int done = 0;
  check_mpi(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test(the corpus listing's broadcast)");
  return done != 0;
}

// Posts the payload's chunks (each at most chunk_bytes: an MPI count is an int), in order.
std::vector<MPI_Request> post_chunks(const MpiSession& session, std::string& payload, size_t chunk_bytes) {
  std::vector<MPI_Request> requests;
  for (size_t at = 0; at < payload.size(); at += chunk_bytes) {
    const int count = static_cast<int>(std::min(chunk_bytes, payload.size() - at));
    requests.push_back(MPI_REQUEST_NULL);
    check_mpi(MPI_Ibcast(payload.data() + at, count, MPI_CHAR, 0, session.world(), &requests.back()),
              "MPI_Ibcast(a chunk of the corpus listing)");
  }
  return requests;
}

// Waits for `requests`, in order, each within timeout_s of the one before: a slow network moving a
// gigabyte is not a silent rank. `late` says who is to blame when one does not complete.
template <class Late>
void wait_in_order(std::vector<MPI_Request>& requests, size_t bytes, double timeout_s, const Late& late) {
  for (auto& request : requests) {
    const Deadline deadline = deadline_after(timeout_s);
    PollBackoff backoff;
    while (!complete(request)) {
      if (Clock::now() > deadline) late();
      backoff.pause_moving(bytes);
    }
  }
}

// Rank 0's listing error as every rank throws it: the kind and the message (see listing_share.h).
std::string error_payload(std::exception_ptr thrown) {
  try {
    std::rethrow_exception(thrown);
  } catch (const Error& error) {
    return std::string(1, static_cast<char>(error.kind())) + error.what();
  } catch (const std::exception& error) {
    if (const auto refusal = machine_refusal(error)) {
      return std::string(1, static_cast<char>(refusal->kind())) + refusal->what();
    }
    return std::string(1, static_cast<char>(ErrorKind::internal)) + "reading the corpus listing failed: " + error.what();
  }
}

[[noreturn]] void throw_error_payload(const std::string& payload) {
  Error error(payload.empty() ? ErrorKind::internal : static_cast<ErrorKind>(payload[0]),
              payload.empty() ? std::string("the corpus listing's error came without a message") : payload.substr(1));
  error.mark_on_every_rank();
  throw error;
}

// The bytes of the listing's fields one after the other, as a serialisation without the shared
// prefixes would hold them: what the log compares the encoding with.
size_t field_bytes(const dataset::CorpusListing& listing) {
  size_t bytes = listing.root.native().size() + listing.listing_file.native().size() + listing.format.size() +
                 listing.recognised.size();
  for (const auto& note : listing.notes) bytes += note.size();
  for (const auto& item : listing.items) {
    bytes += item.source.size() + item.id.size() + item.audio.native().size() + item.text.size() +
             item.speaker.size() + item.language.size() + item.reject_detail.size();
    for (const auto& [key, value] : item.metadata) bytes += key.size() + value.size();
  }
  return bytes;
}

// Rank 0: waits for its own read, broadcasting a keepalive every timeout_s / 4, then the listing or
// its error. Returns the listing; throws the error as every rank does.
dataset::CorpusListing send_listing(const MpiSession& session, std::future<dataset::CorpusListing> being_read,
                                    double timeout_s, size_t chunk_bytes) {
  const auto started = Clock::now();
  const auto keepalive_every = std::chrono::duration<double>(timeout_s / 4);
  std::deque<Broadcast> keepalives;
  auto last_keepalive = started;
  while (being_read.wait_for(std::chrono::milliseconds(20)) != std::future_status::ready) {
    while (!keepalives.empty() && complete(keepalives.front().request)) keepalives.pop_front();
    // One in flight at a time: nothing queues up behind a rank that does not take them.
    if (keepalives.empty() && Clock::now() - last_keepalive >= keepalive_every) {
      if (last_keepalive == started) {
        logger()->info("still reading the corpus listing; the other {} rank(s) wait for it (a keepalive every "
                       "{:.1f} s)",
                       session.size() - 1, keepalive_every.count());
      }
      keepalives.push_back(post_header(session, State::reading, 0));
      last_keepalive = Clock::now();
    }
  }
  std::optional<dataset::CorpusListing> listing;
  std::string payload;
  try {
    listing = being_read.get();
    payload = dataset::encode_listing(*listing);
  } catch (...) {
    payload = error_payload(std::current_exception());
  }
  const double read_s = seconds_since(started);
  Broadcast header = post_header(session, listing ? State::listing : State::error, payload.size());
  std::vector<MPI_Request> requests;
  for (auto& keepalive : keepalives) requests.push_back(keepalive.request);
  requests.push_back(header.request);
  for (MPI_Request request : post_chunks(session, payload, chunk_bytes)) requests.push_back(request);
  wait_in_order(requests, payload.size(), timeout_s, [&] {
    throw TransportError("timed out after " + std::to_string(timeout_s) +
                         " s (runtime.timeout_s) broadcasting the corpus listing (" + std::to_string(payload.size()) +
                         " bytes) to the other ranks: one of them does not take it (dead, stopped or cut off)");
  });
  if (!listing) throw_error_payload(payload);
  logger()->info("corpus listing: {} rows, {} bytes encoded ({} bytes of fields), shared with {} rank(s) {:.2f} s "
                 "after it was read",
                 listing->items.size(), payload.size(), field_bytes(*listing), session.size() - 1,
                 seconds_since(started) - read_s);
  return std::move(*listing);
}

// Ranks other than 0: rank 0's keepalives until its listing (or error) comes.
dataset::CorpusListing receive_listing(const MpiSession& session, double timeout_s, size_t chunk_bytes) {
  const auto silent = [&](const std::string& awaited) {
    throw TransportError(session.describe(0) + " reads the corpus listing for every rank, and has sent neither " +
                         awaited + " nor a sign that it is still reading for " + std::to_string(timeout_s) +
                         " s (runtime.timeout_s): it is dead, stopped or cut off from this rank. Its own log says "
                         "more; raise runtime.timeout_s only if it is merely slow");
  };
  Header header;
  do {
    MPI_Request request = MPI_REQUEST_NULL;
    check_mpi(MPI_Ibcast(header.words.data(), 2, MPI_INT64_T, 0, session.world(), &request),
              "MPI_Ibcast(the corpus listing's header)");
    std::vector<MPI_Request> one{request};
    wait_in_order(one, 0, timeout_s, [&] { silent("the corpus listing"); });
  } while (header.state() == State::reading);
  if (header.state() != State::listing && header.state() != State::error) {
    throw Error(ErrorKind::internal, "rank 0 sent the corpus listing's header with state " +
                                         std::to_string(header.words[0]) + ": report this as a bug");
  }
  std::string payload(header.bytes(), '\0');
  std::vector<MPI_Request> requests = post_chunks(session, payload, chunk_bytes);
  wait_in_order(requests, payload.size(), timeout_s, [&] { silent("the rest of the corpus listing"); });
  if (header.state() == State::error) throw_error_payload(payload);
  return dataset::decode_listing(payload);
}

}  // namespace

dataset::CorpusListing share_listing(const MpiSession& session, std::future<dataset::CorpusListing> being_read,
                                     double timeout_s, size_t chunk_bytes) {
  if (session.rank() != 0) return receive_listing(session, timeout_s, chunk_bytes);
  if (session.size() == 1) {
    // No one to send to; the error is still the one the ranks would share, said the same way.
    try {
      return being_read.get();
    } catch (...) {
      throw_error_payload(error_payload(std::current_exception()));
    }
  }
  return send_listing(session, std::move(being_read), timeout_s, chunk_bytes);
}

}  // namespace sluice::runtime
