#include "runtime/transport/mpi_feed.h"

#include <algorithm>
#include <string>

#include "common/log.h"

namespace sluice::transport::detail {
namespace {

// How long a closing or failing endpoint waits for its last small messages and for cancelled
// receives: enough for eager messages, short enough that destroying an endpoint never hangs.
constexpr double grace_s = 0.5;

std::string describe_peer(const MpiSession& session, int peer) { return session.describe(peer); }

void check_peer(const MpiSession& session, int peer, const ChannelOptions& options, const char* transport) {
  if (peer < 0 || peer >= session.size() || peer == session.rank()) {
    throw ConfigError("feed channel \"" + options.name + "\" (" + transport + "): peer rank " +
                      std::to_string(peer) + " is not another rank of this job (rank " +
                      std::to_string(session.rank()) + " of " + std::to_string(session.size()) +
                      "); use the inproc transport inside one rank");
  }
}

// Whether MPI moves a large message into the receiver's memory without the sender's polls: Open
// MPI's shared-memory transport with a single-copy mechanism (CMA, XPMEM, KNEM), where the
// receiver copies straight out of the sender's buffer. Without one (btl_vader_single_copy_mechanism
// = none, common in containers without ptrace rights), the bytes move in fragments, each handed
// out inside the sender's own MPI calls, so the receiver waits for the sender's next poll.
// Read once from Open MPI's MPI_T control variable; with any other MPI, or without the variable
// (a single process, no shared-memory transport loaded): false, the sender's polls are needed.
// It describes the node's shared memory, which is what feed channels use: the role plan keeps a
// data rank and its model ranks on one node (a channel between nodes would be paced as if the
// receiver copied alone, and its batches would wait up to a poll for the sender).
bool receiver_copies_alone() {
  static const bool alone = [] {
    int provided = 0;
    if (MPI_T_init_thread(MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) return false;
    bool found = false;
    int count = 0;
    // MPI_T's codes are its own (not MPI error classes for MPI_Error_string): a failed query is
    // only an unknown answer, so each is compared here rather than passed to check_mpi.
    if (MPI_T_cvar_get_num(&count) != MPI_SUCCESS) count = 0;
    for (int i = 0; i < count && !found; ++i) {
      char name[256], description[1024];
      int name_length = sizeof(name), description_length = sizeof(description), verbosity = 0, binding = 0, scope = 0;
      MPI_Datatype type;
      MPI_T_enum values = MPI_T_ENUM_NULL;
      if (MPI_T_cvar_get_info(i, name, &name_length, &verbosity, &type, &values, description, &description_length,
                              &binding, &scope) != MPI_SUCCESS ||
          std::string(name) != "btl_vader_single_copy_mechanism" || type != MPI_INT || values == MPI_T_ENUM_NULL) {
        continue;
      }
      MPI_T_cvar_handle handle;
      int elements = 0, value = -1;
      if (MPI_T_cvar_handle_alloc(i, nullptr, &handle, &elements) != MPI_SUCCESS) break;
      if (elements == 1 && MPI_T_cvar_read(handle, &value) == MPI_SUCCESS) {
        int items = 0;
        char enum_name[256];
        int enum_length = sizeof(enum_name);
        if (MPI_T_enum_get_info(values, &items, enum_name, &enum_length) != MPI_SUCCESS) items = 0;
        for (int k = 0; k < items; ++k) {
          char item[256];
          int item_length = sizeof(item), item_value = 0;
          if (MPI_T_enum_get_item(values, k, &item_value, item, &item_length) == MPI_SUCCESS && item_value == value) {
            found = std::string(item) != "none";
          }
        }
      }
      (void)MPI_T_cvar_handle_free(&handle);  // the answer is read; a failed release loses nothing
      break;
    }
    (void)MPI_T_finalize();  // likewise
    return found;
  }();
  return alone;
}

template <typename Message>
bool try_receive(MPI_Comm comm, int peer, int tag, Message& message) {
  int arrived = 0;
  MPI_Status status;
  check_mpi(MPI_Iprobe(peer, tag, comm, &arrived, &status), "MPI_Iprobe");
  if (!arrived) return false;
  // The message has arrived (small, eager): this MPI_Recv completes without waiting.
  check_mpi(MPI_Recv(&message, sizeof(Message), MPI_BYTE, peer, tag, comm, MPI_STATUS_IGNORE), "MPI_Recv");
  return true;
}

}  // namespace

bool PeerWatch::gone(Deadline deadline) const {
  if (heartbeat_ == nullptr) return Clock::now() > deadline;
  return heartbeat_->lost(peer_, timeout_s_);
}

std::string PeerWatch::failure(const EndpointNames& names, const std::string& awaited, std::optional<uint64_t> last,
                               const std::string& hint) const {
  if (heartbeat_ == nullptr) return describe_timeout(names, timeout_s_, awaited, last, hint);
  const std::string waited = heartbeat_->failed(peer_) ? "stopped waiting for " : "timed out waiting for ";
  return describe_failure(names, waited + awaited + ": " + heartbeat_->describe_loss(peer_, timeout_s_),
                          last, hint.empty() ? "Its log and its node say why; a slow but running peer is waited for" : hint);
}

int feed_tag(int channel_id, FeedTag tag) { return 0x4000 + 8 * channel_id + static_cast<int>(tag); }


// ---------------------------------------------------------------------------------------------
// SmallSends

SmallSends::~SmallSends() {
  for (auto& pending : pending_) {
    int done = 0;
    if (!check_mpi_or_warn(MPI_Test(&pending->request, &done, MPI_STATUS_IGNORE), "MPI_Test(small send)") || !done) {
      // MPI may still read the bytes: free the request, keep (leak) the few bytes.
      check_mpi_or_warn(MPI_Request_free(&pending->request), "MPI_Request_free(small send)");
      (void)pending.release();
    }
  }
}

void SmallSends::post(const void* data, size_t bytes, int tag) {
  auto pending = std::make_unique<Pending>();
  pending->bytes.assign(static_cast<const char*>(data), static_cast<const char*>(data) + bytes);
  check_mpi(MPI_Isend(pending->bytes.data(), static_cast<int>(bytes), MPI_BYTE, peer_, tag, comm_,
                      &pending->request),
            "MPI_Isend");
  pending_.push_back(std::move(pending));
}

void SmallSends::progress() {
  while (!pending_.empty()) {
    int done = 0;
    check_mpi(MPI_Test(&pending_.front()->request, &done, MPI_STATUS_IGNORE), "MPI_Test");
    if (!done) return;
    pending_.pop_front();
  }
}

bool SmallSends::drain(Deadline deadline) {
  PollBackoff backoff;
  while (true) {
    progress();
    if (pending_.empty()) return true;
    if (Clock::now() > deadline) return false;
    backoff.pause();
  }
}

// ---------------------------------------------------------------------------------------------
// MpiFeedSender

MpiFeedSender::MpiFeedSender(const MpiSession& session, int receiver, const ChannelOptions& options,
                             const std::string& transport)
    : session_(session),
      peer_(receiver),
      options_(options),
      names_{options.name, transport, "sender", describe_peer(session, receiver)},
      comm_(session.world()),
      watch_(session, receiver, options.timeout_s),
      small_(session.world(), receiver),
      moves_alone_(receiver_copies_alone()) {
  check_peer(session, receiver, options, transport.c_str());
}

MpiFeedSender::~MpiFeedSender() {
  try {
    if (!closed_ && !failure_.failed()) {
      ControlMessage message;
      message.kind = ControlKind::aborted;
      message.batches = next_sequence_;
      small_.post(&message, sizeof(message), feed_tag(options_.channel_id, FeedTag::to_receiver));
    }
    small_.drain(deadline_after(std::min(grace_s, options_.timeout_s)));
  } catch (const std::exception& error) {
    log::get("runtime")->warn("feed channel \"{}\": closing the sender: {}", options_.name, error.what());
  }
}

std::optional<uint64_t> MpiFeedSender::last() const {
  return next_sequence_ == 0 ? std::nullopt : std::optional<uint64_t>(next_sequence_ - 1);
}

std::string MpiFeedSender::failure_text(const std::string& what, const std::string& hint) const {
  return describe_failure(names_, what, last(), hint);
}

void MpiFeedSender::fail(const std::string& message, bool after_peer_failure) {
  const bool first = !failure_.failed();
  failure_.record(message);
  if (first) {
    try {
      on_failure();
      ControlMessage abort;
      abort.kind = ControlKind::aborted;
      abort.batches = next_sequence_;
      small_.post(&abort, sizeof(abort), feed_tag(options_.channel_id, FeedTag::to_receiver));
      small_.progress();
    } catch (const std::exception& error) {
      log::get("runtime")->warn("feed channel \"{}\": telling the receiver of a failure: {}", options_.name,
                                error.what());
    }
  }
  TransportError error(message);
  if (after_peer_failure) error.mark_after_peer_failure();
  throw error;
}

void MpiFeedSender::take_credits() {
  CreditMessage credit;
  while (try_receive(comm_, peer_, feed_tag(options_.channel_id, FeedTag::credit), credit)) {
    if (credit.magic != feed_magic || credit.slot < 0 || credit.slot >= options_.slots ||
        credit.slots != options_.slots || credit.slot_bytes != options_.slot_bytes) {
      fail(failure_text("the receiver's credit does not match this sender: it has " +
                            std::to_string(credit.slots) + " slots of " + std::to_string(credit.slot_bytes) +
                            " bytes, this sender expects " + std::to_string(options_.slots) + " of " +
                            std::to_string(options_.slot_bytes),
                        "Both ends of a channel must be made with the same ChannelOptions and channel_id"));
    }
    credits_.push_back(credit.slot);
  }
}

void MpiFeedSender::take_control() {
  ControlMessage message;
  while (try_receive(comm_, peer_, feed_tag(options_.channel_id, FeedTag::to_sender), message)) {
    receiver_stopped_ = true;
    receiver_closed_ = message.kind == ControlKind::shutdown;
    receiver_stop_reason_ = message.kind == ControlKind::shutdown
                                ? "the receiver shut the channel down"
                                : "the receiver aborted (destroyed without close(), or failed)";
  }
}

void MpiFeedSender::wait_for(const std::function<bool()>& done, Deadline deadline, const std::string& awaited,
                             size_t moving_bytes) {
  // A batch that needs this rank's polls to move (receiver_copies_alone) moves once the receiver
  // is in receive(), which this rank learns only at a poll: those polls stay short (1 ms).
  PollBackoff backoff(moving_bytes > 0 && !moves_alone_ ? PollBackoff::short_cap : PollBackoff::default_max_sleep);
  // Whether the receiver is in receive() now, so that the bytes move while both ends poll: it
  // held no slot when this batch was sent, or it gave a slot back since (a new credit).
  bool receiver_receiving = receiver_starved_;
  while (true) {
    if (done()) return;
    take_control();
    if (receiver_stopped_) {
      fail(failure_text(receiver_stop_reason_ + " while this sender waited for " + awaited), !receiver_closed_);
    }
    small_.progress();
    if (watch_.gone(deadline)) fail(watch_.failure(names_, awaited, last()));
    if (moving_bytes == 0) {
      backoff.pause();
      continue;
    }
    const size_t credits = credits_.size();
    take_credits();
    if (credits_.size() > credits) {
      receiver_receiving = true;
      backoff.reset();
    }
    if (receiver_receiving) {
      backoff.pause_moving(moving_bytes);
    } else {
      backoff.pause();
    }
  }
}

void MpiFeedSender::send_header(const BatchHeader& header) {
  small_.post(&header, sizeof(header), feed_tag(options_.channel_id, FeedTag::header));
}

void MpiFeedSender::send(const void* data, size_t bytes) {
  failure_.check();
  if (closed_) throw TransportError(failure_text("send() after close()"));
  if (bytes > options_.slot_bytes) {
    throw TransportError(failure_text("batch of " + std::to_string(bytes) + " bytes exceeds slot_bytes = " +
                                          std::to_string(options_.slot_bytes),
                                      "slot_bytes must be the batch plan's largest batch"));
  }
  const auto start = Clock::now();
  const Deadline deadline = deadline_after(options_.timeout_s);
  try {
    small_.progress();  // retires the headers of earlier batches
    take_credits();
    take_control();
    if (receiver_stopped_) fail(failure_text(receiver_stop_reason_), !receiver_closed_);
    if (credits_.empty()) {
      wait_for(
          [&] {
            take_credits();
            return !credits_.empty();
          },
          deadline,
          "a credit (a free slot): all " + std::to_string(options_.slots) +
              " slots are filled and not yet released by the receiver");
    }
    // Every slot free here: the receiver holds none, so it waits for this batch now.
    receiver_starved_ = credits_.size() >= static_cast<size_t>(options_.slots);
    const int slot = credits_.front();
    credits_.pop_front();
    const double wait_s = seconds_since(start);
    const auto moving = Clock::now();

    BatchHeader header;
    header.slot = slot;
    header.sequence = next_sequence_;
    header.bytes = bytes;
    if (options_.checksum && host_memory()) header.checksum = checksum(data, bytes);
    transfer(data, bytes, header, deadline);
    ++next_sequence_;
    stats_.add_batch(bytes, wait_s, seconds_since(moving));
  } catch (const TransportError& error) {
    if (failure_.failed()) throw;
    // An error from the MPI/CUDA/NCCL wrappers: add the channel's context, fail the endpoint.
    fail(failure_text(std::string("moving a batch failed: ") + error.what()));
  }
}

void MpiFeedSender::close() {
  failure_.check();
  if (closed_) return;
  ControlMessage message;
  message.kind = ControlKind::end_of_stream;
  message.batches = next_sequence_;
  try {
    small_.post(&message, sizeof(message), feed_tag(options_.channel_id, FeedTag::to_receiver));
    if (!small_.drain(deadline_after(options_.timeout_s))) {
      fail(describe_timeout(names_, options_.timeout_s, "the end-of-stream message to leave", last()));
    }
  } catch (const TransportError& error) {
    if (failure_.failed()) throw;
    fail(failure_text(std::string("sending end of stream failed: ") + error.what()));
  }
  closed_ = true;
}

// ---------------------------------------------------------------------------------------------
// MpiFeedReceiver

MpiFeedReceiver::MpiFeedReceiver(const MpiSession& session, int sender, const ChannelOptions& options,
                                 const std::string& transport)
    : session_(session),
      peer_(sender),
      options_(options),
      names_{options.name, transport, "receiver", describe_peer(session, sender)},
      comm_(session.world()),
      watch_(session, sender, options.timeout_s),
      small_(session.world(), sender),
      slots_(static_cast<size_t>(options.slots)),
      headers_(new BatchHeader[static_cast<size_t>(options.slots)]) {
  check_peer(session, sender, options, transport.c_str());
}

MpiFeedReceiver::~MpiFeedReceiver() {
  // Subclasses call shut_down() in their destructors; this only covers a constructor that threw
  // after grant_all().
  shut_down_for_destruction();
  if (slots_must_leak_) (void)headers_.release();
}

void MpiFeedReceiver::grant_all() {
  for (int slot = 0; slot < options_.slots; ++slot) grant(slot);
}

void MpiFeedReceiver::grant(int slot) {
  Slot& s = slots_[static_cast<size_t>(slot)];
  s.header_seen = false;
  check_mpi(MPI_Irecv(&headers_[static_cast<size_t>(slot)], sizeof(BatchHeader), MPI_BYTE, peer_,
                      feed_tag(options_.channel_id, FeedTag::header), comm_, &s.header_request),
            "MPI_Irecv(batch header)");
  on_grant(slot);
  CreditMessage credit;
  credit.slot = slot;
  credit.slots = options_.slots;
  credit.slot_bytes = options_.slot_bytes;
  small_.post(&credit, sizeof(credit), feed_tag(options_.channel_id, FeedTag::credit));
  s.state = SlotState::granted;
  granted_.push_back(slot);
}

std::optional<uint64_t> MpiFeedReceiver::last() const {
  return delivered_ == 0 ? std::nullopt : std::optional<uint64_t>(delivered_ - 1);
}

std::string MpiFeedReceiver::failure_text(const std::string& what, const std::string& hint) const {
  return describe_failure(names_, what, last(), hint);
}

std::string MpiFeedReceiver::held_hint() const {
  const auto held = std::count_if(slots_.begin(), slots_.end(),
                                  [](const Slot& s) { return s.state == SlotState::held; });
  if (held < options_.slots) return "";
  return "All " + std::to_string(options_.slots) +
         " slots are held by the trainer, so no batch can arrive: release() one before receive()";
}

void MpiFeedReceiver::fail(const std::string& message, bool after_peer_failure) {
  const bool first = !failure_.failed();
  failure_.record(message);
  if (first) {
    try {
      on_failure();
    } catch (const std::exception& error) {
      log::get("runtime")->warn("feed channel \"{}\": {}", options_.name, error.what());
    }
    shut_down(ControlKind::aborted);
  }
  TransportError error(message);
  if (after_peer_failure) error.mark_after_peer_failure();
  throw error;
}

void MpiFeedReceiver::progress() {
  for (const int slot : granted_) {
    Slot& s = slots_[static_cast<size_t>(slot)];
    if (s.header_seen) continue;
    int done = 0;
    check_mpi(MPI_Test(&s.header_request, &done, MPI_STATUS_IGNORE), "MPI_Test(batch header)");
    // Headers match receives in grant order: a later one cannot be complete before this one.
    if (!done) break;
    const BatchHeader& h = headers_[static_cast<size_t>(slot)];
    if (h.magic != feed_magic || h.slot != slot || h.sequence != headers_seen_ || h.bytes > options_.slot_bytes) {
      fail(failure_text("malformed batch header: slot " + std::to_string(h.slot) + " (expected " +
                            std::to_string(slot) + "), sequence " + std::to_string(h.sequence) + " (expected " +
                            std::to_string(headers_seen_) + "), " + std::to_string(h.bytes) + " bytes",
                        "Both ends of a channel must be made with the same ChannelOptions and channel_id"));
    }
    s.header_seen = true;
    ++headers_seen_;
    on_header(slot, h);
  }
  ControlMessage message;
  while (try_receive(comm_, peer_, feed_tag(options_.channel_id, FeedTag::to_receiver), message)) {
    if (message.kind == ControlKind::end_of_stream) {
      end_after_ = message.batches;
    } else {
      sender_aborted_ = true;
      sender_aborted_after_ = message.batches;
    }
  }
  small_.progress();
}

std::optional<ReceivedBatch> MpiFeedReceiver::receive() {
  failure_.check();
  if (ended_) return std::nullopt;
  if (closed_) throw TransportError(failure_text("receive() after close()"));
  const auto start = Clock::now();
  const Deadline deadline = deadline_after(options_.timeout_s);
  PollBackoff backoff;
  bool moving = false;
  try {
    while (true) {
      progress();
      size_t moving_bytes = 0;  // the next batch's header is here, its bytes are moving
      if (!granted_.empty()) {
        const int slot = granted_.front();
        Slot& s = slots_[static_cast<size_t>(slot)];
        const BatchHeader& header = headers_[static_cast<size_t>(slot)];
        size_t received = header.bytes;
        if (s.header_seen && payload_complete(slot, header, &received)) {
          const double wait_s = seconds_since(start);
          const auto checking = Clock::now();
          if (received != header.bytes) {
            fail(failure_text("batch " + std::to_string(header.sequence) + ": header says " +
                              std::to_string(header.bytes) + " bytes, " + std::to_string(received) +
                              " arrived"));
          }
          if (options_.checksum && host_memory() &&
              checksum(slot_data(slot), header.bytes) != header.checksum) {
            fail(failure_text("checksum mismatch in batch " + std::to_string(header.sequence),
                              "The bytes were corrupted between the ranks"));
          }
          granted_.pop_front();
          s.state = SlotState::held;
          ++delivered_;
          stats_.add_batch(header.bytes, wait_s, seconds_since(checking));
          return ReceivedBatch{slot, header.sequence, slot_data(slot), header.bytes};
        }
        if (s.header_seen) moving_bytes = header.bytes;
      }
      if (end_after_ && delivered_ >= *end_after_) {
        ended_ = true;
        stats_.add_wait(seconds_since(start));
        return std::nullopt;
      }
      if (sender_aborted_) {
        fail(failure_text("the sender aborted (destroyed without close(), or failed) after sending " +
                          std::to_string(sender_aborted_after_) + " batches"),
             true);
      }
      // A trainer that holds every slot waits for nothing that can come: that fails at the
      // deadline, however alive the sender is.
      const std::string awaited = "batch " + std::to_string(delivered_);
      const std::string held = held_hint();
      if (!held.empty() && Clock::now() > deadline) {
        fail(describe_timeout(names_, options_.timeout_s, awaited, last(), held));
      }
      if (watch_.gone(deadline)) fail(watch_.failure(names_, awaited, last()));
      if (moving_bytes > 0) {
        if (!moving) backoff.reset();  // the bytes start to move now, however long the header took
        moving = true;
        backoff.pause_moving(moving_bytes);
      } else {
        backoff.pause();
      }
    }
  } catch (const TransportError& error) {
    if (failure_.failed()) throw;
    fail(failure_text(std::string("receiving a batch failed: ") + error.what()));
  }
}

void MpiFeedReceiver::release(const ReceivedBatch& batch) {
  failure_.check();
  if (batch.slot < 0 || batch.slot >= options_.slots ||
      slots_[static_cast<size_t>(batch.slot)].state != SlotState::held) {
    throw TransportError(failure_text("release() of slot " + std::to_string(batch.slot) +
                                          ", which the trainer does not hold",
                                      "Release each received batch exactly once"));
  }
  slots_[static_cast<size_t>(batch.slot)].state = SlotState::idle;
  if (closed_ || ended_) return;
  try {
    grant(batch.slot);
    progress();  // lets later batches' transfers start while the trainer computes
  } catch (const TransportError& error) {
    if (failure_.failed()) throw;
    fail(failure_text(std::string("returning a credit failed: ") + error.what()));
  }
}

void MpiFeedReceiver::close() {
  if (closed_) return;
  closed_ = true;
  shut_down(ControlKind::shutdown);
}

void MpiFeedReceiver::shut_down(ControlKind kind) noexcept {
  if (shut_down_) return;
  shut_down_ = true;
  before_shut_down();
  try {
    // Unmatched if the sender is gone or done: harmless.
    ControlMessage message;
    message.kind = kind;
    small_.post(&message, sizeof(message), feed_tag(options_.channel_id, FeedTag::to_sender));
    const Deadline deadline = deadline_after(std::min(grace_s, options_.timeout_s));
    for (const int slot : granted_) {
      Slot& s = slots_[static_cast<size_t>(slot)];
      if (s.header_request != MPI_REQUEST_NULL) {
        check_mpi_or_warn(MPI_Cancel(&s.header_request), "MPI_Cancel(batch header)");
        int done = 0;
        PollBackoff backoff;
        while (check_mpi_or_warn(MPI_Test(&s.header_request, &done, MPI_STATUS_IGNORE), "MPI_Test(batch header)") &&
               !done && Clock::now() < deadline) {
          backoff.pause();
        }
        if (!done) {
          check_mpi_or_warn(MPI_Request_free(&s.header_request), "MPI_Request_free(batch header)");
          slots_must_leak_ = true;
        }
      }
      if (!cancel_payload(slot)) slots_must_leak_ = true;
    }
    granted_.clear();
    small_.drain(deadline);
  } catch (const std::exception& error) {
    log::get("runtime")->warn("feed channel \"{}\": shutting the receiver down: {}", options_.name, error.what());
  }
  if (slots_must_leak_ && !slots_kept_alive_) {
    log::get("runtime")->warn(
        "feed channel \"{}\": a transfer from {} could not be cancelled; its slot memory is left allocated",
        options_.name, names_.peer);
  }
}

}  // namespace sluice::transport::detail
