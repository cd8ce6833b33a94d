#pragma once
// Private to runtime/transport: the feed protocol's messages over MPI, shared by the mpi,
// cuda_ipc and nccl transports. The base classes below run the protocol (credits, headers,
// end of stream, shutdown, abort, deadlines); a transport only says how a batch's bytes move.
//
// Messages of channel c between ranks d (sender) and m (receiver), tag 0x4000 + 8c + k:
//   k=0 credit      m -> d  CreditMessage: a free slot (and m's K and slot_bytes, checked by d)
//   k=1 header      d -> m  BatchHeader: slot, sequence, bytes, checksum
//   k=2 payload     d -> m  the batch's bytes (mpi transport only)
//   k=3 to receiver d -> m  ControlMessage: end of stream after N batches, or aborted
//   k=4 to sender   m -> d  ControlMessage: shutdown, or aborted
//   k=5 setup       either  transport set-up (cuda_ipc slot handles, NCCL unique id)
// m posts its MPI_Irecv for a slot's header (and payload) before it sends the slot's credit, so
// receives are matched in grant order, which is the order d uses credits in.
#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <mpi.h>

#include "common/mpi_session.h"
#include "runtime/transport/channel_support.h"

namespace sluice::transport::detail {

enum class FeedTag : int { credit = 0, header = 1, payload = 2, to_receiver = 3, to_sender = 4, setup = 5 };
int feed_tag(int channel_id, FeedTag tag);

constexpr uint32_t feed_magic = 0x53464244;  // "SFBD"

struct CreditMessage {
  uint32_t magic = feed_magic;
  int32_t slot = -1;
  int32_t slots = 0;
  int32_t reserved = 0;
  uint64_t slot_bytes = 0;
};

struct BatchHeader {
  uint32_t magic = feed_magic;
  int32_t slot = -1;
  uint64_t sequence = 0;
  uint64_t bytes = 0;
  uint64_t checksum = 0;
};

enum class ControlKind : uint32_t { end_of_stream = 1, shutdown = 2, aborted = 3 };

struct ControlMessage {
  uint32_t magic = feed_magic;
  ControlKind kind = ControlKind::aborted;
  uint64_t batches = 0;  // end_of_stream, aborted from the sender: batches sent
};

// How an endpoint decides that its peer is gone (common/heartbeat.h, LIVENESS): with the
// process's heartbeat, once the peer rank has been silent for timeout_s, however long the wait
// has lasted (a slow peer is waited for); without one (SLUICE_HEARTBEAT), at the wait's deadline.
class PeerWatch {
 public:
  PeerWatch(const MpiSession& session, int peer, double timeout_s)
      : heartbeat_(session.heartbeat(timeout_s)), peer_(peer), timeout_s_(timeout_s) {}
  // Whether a wait that started with `deadline` = its start + timeout_s must fail now.
  bool gone(Deadline deadline) const;
  // The error text: what was awaited, who went silent (or the deadline that passed).
  std::string failure(const EndpointNames& names, const std::string& awaited, std::optional<uint64_t> last,
                      const std::string& hint = "") const;

 private:
  const Heartbeat* heartbeat_;
  int peer_;
  double timeout_s_;
};

// Small messages (credits, headers, control) sent without waiting: each keeps its own copy of
// the bytes until MPI is done with it. Eager-sized, so they complete without the peer's help.
class SmallSends {
 public:
  SmallSends(MPI_Comm comm, int peer) : comm_(comm), peer_(peer) {}
  ~SmallSends();  // frees finished requests; leaks the few bytes of unfinished ones
  SmallSends(const SmallSends&) = delete;
  SmallSends& operator=(const SmallSends&) = delete;

  void post(const void* data, size_t bytes, int tag);
  void progress();  // retires finished sends
  // Waits (polling) until every posted send finished or `deadline`; false on expiry.
  bool drain(Deadline deadline);

 private:
  struct Pending {
    std::vector<char> bytes;
    MPI_Request request = MPI_REQUEST_NULL;
  };
  MPI_Comm comm_;
  int peer_;
  std::deque<std::unique_ptr<Pending>> pending_;
};

// The sending end over MPI. A transport overrides transfer().
class MpiFeedSender : public SendChannel {
 public:
  ~MpiFeedSender() override;
  void send(const void* data, size_t bytes) final;
  void close() final;
  bool receiver_closed() const final { return receiver_closed_.load(); }
  ChannelStats stats() const final { return stats_.snapshot(); }

 protected:
  MpiFeedSender(const MpiSession& session, int receiver, const ChannelOptions& options,
                const std::string& transport);

  // Moves `bytes` from `data` into the receiver's slot header.slot and sends `header` (already
  // filled in) with send_header(); returns when `data` may be reused. Waits with wait_for().
  virtual void transfer(const void* data, size_t bytes, const BatchHeader& header, Deadline deadline) = 0;
  // Called once when the endpoint fails (e.g. ncclCommAbort), before the error is thrown.
  virtual void on_failure() {}
  // Whether checksums apply (host memory).
  virtual bool host_memory() const { return true; }

  void send_header(const BatchHeader& header);
  // Polls `done` until it returns true; meanwhile watches the receiver's control messages
  // (shutdown, abort: fail at once) and its liveness (PeerWatch: fail naming `awaited` once the
  // receiver is silent; `deadline` applies only without a heartbeat). `moving_bytes` > 0: a
  // batch of that many bytes is on its way. Whether it needs this rank's polls to move depends
  // on MPI (Open MPI's shared memory with a single-copy mechanism lets the receiver copy it
  // alone; without one, fragments move only while both ends poll), and it can move only while
  // the receiver is inside receive(): so the polls spin (PollBackoff::pause_moving) when the
  // receiver held no slot at send() or a credit arrives meanwhile (it gave a slot back and is
  // receiving now), and otherwise slow down as any wait does (a receiver busy with its step).
  void wait_for(const std::function<bool()>& done, Deadline deadline, const std::string& awaited,
                size_t moving_bytes = 0);
  // `after_peer_failure`: the peer aborted (Error::mark_after_peer_failure).
  [[noreturn]] void fail(const std::string& message, bool after_peer_failure = false);
  std::string failure_text(const std::string& what, const std::string& hint = "") const;

  const MpiSession& session_;
  const int peer_;
  const ChannelOptions options_;
  const EndpointNames names_;
  MPI_Comm comm_;
  const PeerWatch watch_;

 private:
  std::optional<uint64_t> last() const;
  void take_credits();
  void take_control();

  FailureLatch failure_;
  StatsCounter stats_;
  SmallSends small_;
  std::deque<int> credits_;
  bool receiver_starved_ = false;  // at the current send(): every slot was free (see wait_for)
  const bool moves_alone_;          // MPI moves a batch without this rank's polls (mpi_feed.cpp)
  uint64_t next_sequence_ = 0;
  bool closed_ = false;
  bool receiver_stopped_ = false;
  std::atomic<bool> receiver_closed_{false};  // its stop was a shutdown, not an abort
  std::string receiver_stop_reason_;
};

// The receiving end over MPI. A transport provides the slots and how a payload completes;
// its constructor calls grant_all() once its slots exist.
class MpiFeedReceiver : public ReceiveChannel {
 public:
  void keep_slots_alive() override {
    slots_must_leak_ = true;
    slots_kept_alive_ = true;
  }
  ~MpiFeedReceiver() override;
  std::optional<ReceivedBatch> receive() final;
  void release(const ReceivedBatch& batch) final;
  void close() final;
  ChannelStats stats() const final { return stats_.snapshot(); }

 protected:
  MpiFeedReceiver(const MpiSession& session, int sender, const ChannelOptions& options,
                  const std::string& transport);

  void grant_all();
  // Tells the sender (shutdown or aborted) and cancels outstanding receives. Subclasses call
  // shut_down_for_destruction() first in their destructors, while their slots still exist, and
  // then leak the slots if slots_must_leak_. Never throws.
  void shut_down(ControlKind kind) noexcept;
  void shut_down_for_destruction() noexcept {
    shut_down(ended_ ? ControlKind::shutdown : ControlKind::aborted);
  }

  virtual void* slot_data(int slot) = 0;
  virtual bool host_memory() const { return true; }
  // Called when `slot` is granted, before its credit goes out (mpi: post the payload receive).
  virtual void on_grant(int /*slot*/) {}
  // Called once per batch, in sequence order, when its header arrived (nccl: post ncclRecv).
  virtual void on_header(int /*slot*/, const BatchHeader& /*header*/) {}
  // Whether the bytes of `header` are complete in its slot; `bytes_received` may be set when
  // the transport knows the size it got (mpi), for a check against the header.
  virtual bool payload_complete(int slot, const BatchHeader& header, size_t* bytes_received) = 0;
  // Gives up the slot's outstanding payload transfer; false if it cannot be (slots must leak).
  virtual bool cancel_payload(int /*slot*/) noexcept { return true; }
  virtual void on_failure() {}
  // Called first in shut_down(), before any receive is cancelled (mpi: stop the progress pump).
  virtual void before_shut_down() noexcept {}

  // `after_peer_failure`: the peer aborted (Error::mark_after_peer_failure).
  [[noreturn]] void fail(const std::string& message, bool after_peer_failure = false);
  std::string failure_text(const std::string& what, const std::string& hint = "") const;

  const MpiSession& session_;
  const int peer_;
  const ChannelOptions options_;
  const EndpointNames names_;
  MPI_Comm comm_;
  const PeerWatch watch_;

 private:
  enum class SlotState { granted, held, idle };
  struct Slot {
    SlotState state = SlotState::idle;
    MPI_Request header_request = MPI_REQUEST_NULL;
    bool header_seen = false;
  };

  void grant(int slot);
  void progress();  // headers in grant order, the sender's control messages, small sends
  std::optional<uint64_t> last() const;
  std::string held_hint() const;

  FailureLatch failure_;
  StatsCounter stats_;
  SmallSends small_;
  std::vector<Slot> slots_;
  // Header receive buffers, apart from slots_ so that they can be leaked with the slots.
  std::unique_ptr<BatchHeader[]> headers_;
  std::deque<int> granted_;         // grant order = the order batches arrive in
  uint64_t headers_seen_ = 0;       // next expected sequence among headers
  uint64_t delivered_ = 0;
  std::optional<uint64_t> end_after_;
  bool sender_aborted_ = false;
  uint64_t sender_aborted_after_ = 0;
  bool ended_ = false;
  bool closed_ = false;
  bool shut_down_ = false;

 protected:
  // True after shut_down() found a transfer it could not cancel, or after keep_slots_alive():
  // the subclass must not free its slots.
  bool slots_must_leak_ = false;
  bool slots_kept_alive_ = false;  // keep_slots_alive(): not a failed cancel, nothing to warn about
};

}  // namespace sluice::transport::detail
