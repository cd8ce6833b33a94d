#pragma once
// The batch feed: how a data rank hands padded batches to a model rank. Every transport (inproc,
// mpi, cuda_ipc, nccl) implements these two interfaces and passes one test suite
// (tests/runtime/transport/feed_channel_suite.h). A backend's only public header is its factory.
//
// THE FEED PROTOCOL (one channel: data rank d feeds model rank m)
//
//  1. Slots and credits. m owns K receive slots (ChannelOptions::slots, default 3), each
//     slot_bytes big (the largest batch of the batch plan, known up front). When the channel
//     opens, m grants d one credit per slot.
//  2. Batches. d sends a batch only against a credit, into the slot that credit names. A batch
//     is opaque bytes (0 <= bytes <= slot_bytes) with a header: sequence number (0, 1, 2, ... per
//     channel), byte count, slot, and an optional checksum (XXH3-64 of the bytes; host
//     transports only). d uses credits in the order m granted them, so batches arrive in
//     sequence order; m checks the sequence, the size and (when on) the checksum of each.
//  3. Release. receive() hands a filled slot to the trainer; release() gives it back, and m
//     grants its credit again. So d never has more than K batches in flight, and a slow
//     trainer makes d wait in send(), never drop or overwrite.
//  4. End of stream and shutdown are explicit messages. d's close() sends "end after N batches";
//     m's receive() returns nullopt once it has handed out all N. m's close() sends "shutdown":
//     a send() waiting for a credit fails at once, and receiver_closed() then says that the
//     receiver chose to stop. An endpoint destroyed without close(), or failed, tells its peer
//     "aborted", and the peer's waits fail at once.
//  5. Deadlines tell slow from dead (LIVENESS in common/heartbeat.h). A blocking call waits as
//     long as its peer is alive, however long the peer's step, read or checkpoint takes; it
//     fails once the peer rank has given no sign of life (the process's heartbeat) for timeout_s
//     (runtime.timeout_s): stopped, dead or cut off. The TransportError names the channel, the
//     peer (rank and host), the last sequence number seen, what was awaited and how long the peer
//     was silent. In-process peers (inproc, nccl loopback) are threads of this process: alive
//     while it runs, so their waits end only by the peer's close or failure. One exception: a
//     receive() while the trainer holds every slot can never complete and fails at timeout_s.
//     Without a heartbeat (SLUICE_HEARTBEAT=off|serialized) every wait is a plain deadline of
//     timeout_s from the start of the call, as before.
//     After a TransportError the endpoint is failed: every later call throws again, and the
//     caller is expected to end the run (MpiSession::abort), not to retry.
//
// THREADING. An endpoint is used by one thread at a time (send()/close() on the data side,
// receive()/release()/close() on the model side). The two endpoints of an in-process pair may be
// used from two threads. stats() may be called from any thread. Transports that talk over MPI
// (mpi, cuda_ipc, nccl) make MPI calls only inside their endpoint's calls, on the calling
// thread, which in `sluice train` is the main thread; MPI runs at MPI_THREAD_MULTIPLE because
// the heartbeat thread calls MPI at any time. A consequence for the mpi transport: a large batch
// moves while the receiving thread is inside a channel call (or, slowly, when the heartbeat
// thread's MPI calls drive Open MPI's progress), so a trainer that computes between receive()
// calls overlaps transfers only up to MPI's eager size; the sender waits for it, alive, without
// failing. GPU transports move bytes on a CUDA stream and are not affected.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace sluice::transport {

struct ChannelOptions {
  // How errors and logs name the channel, e.g. "feed rank 0 -> rank 1".
  std::string name = "feed";
  // K: receive slots, hence the most batches in flight. 2 = double, 3 = triple buffering.
  int slots = 3;
  // The largest batch in bytes (from the batch plan). Required. The mpi transport takes
  // slot_bytes < 2 GiB.
  size_t slot_bytes = 0;
  // runtime.timeout_s: how long the peer may be silent (no heartbeat) before a blocking call
  // fails naming it (see 5. above).
  double timeout_s = 120.0;
  // Verify an XXH3-64 checksum of every batch (host transports; GPU transports refuse it).
  bool checksum = false;
  // Transports over MPI: distinguishes channels between the same two ranks (their MPI tags).
  // Both ends of a channel must use the same id; 0 <= channel_id < 2048.
  int channel_id = 0;
};

// What the bottleneck report needs from one endpoint.
struct ChannelStats {
  uint64_t batches = 0;  // sent, or received (handed to the trainer)
  uint64_t bytes = 0;
  // Sender: time blocked waiting for a credit (the model side is the bottleneck).
  // Receiver: time blocked in receive() until a batch was complete (the data side is).
  double wait_s = 0.0;
  // Sender: time moving bytes after a credit arrived. In the mpi transport this includes
  // waiting for a busy receiving thread to take a batch above MPI's eager size (see THREADING),
  // so wait_s + transfer_s is the sender's time blocked on the model side.
  // Receiver: time spent checking batches (sequence, size, checksum).
  double transfer_s = 0.0;
};

// A filled slot, on loan to the trainer until release(). `data` points into the receiver's slot:
// host memory for inproc and mpi, device memory (the receiver's GPU) for cuda_ipc and nccl.
struct ReceivedBatch {
  int slot = -1;
  uint64_t sequence = 0;
  const void* data = nullptr;
  size_t bytes = 0;
};

class SendChannel {
 public:
  virtual ~SendChannel() = default;
  // Blocks until a credit arrives, then moves `bytes` from `data` into the granted slot; returns
  // when `data` may be reused. `data` is host memory for host transports, device memory for GPU
  // transports, which read it on their own stream: work writing `data` must be complete (or
  // synchronised) before the call. bytes > slot_bytes throws TransportError without failing the
  // channel. If send() fails, MPI or the GPU may still read `data` until the run ends.
  virtual void send(const void* data, size_t bytes) = 0;
  // End of stream: tells the receiver that no batch follows the ones sent. Does not wait for the
  // receiver to consume them. Idempotent; send() after close() throws.
  virtual void close() = 0;
  // Whether the receiver closed its end (ReceiveChannel::close(): it stopped on purpose, e.g. at
  // a stop the model ranks agreed on after a signal), as opposed to failing or being destroyed
  // without close(). Known once a send() saw it (that send() failed); from any thread.
  virtual bool receiver_closed() const = 0;
  virtual ChannelStats stats() const = 0;
};

class ReceiveChannel {
 public:
  virtual ~ReceiveChannel() = default;
  // Blocks until the next batch is complete in its slot; nullopt once the sender closed the
  // stream and every batch was handed out (and on every later call).
  virtual std::optional<ReceivedBatch> receive() = 0;
  // Returns a slot from receive() and its credit to the sender. Batches may be released in any
  // order. GPU transports: no queued GPU work may still read the slot (synchronise first).
  virtual void release(const ReceivedBatch& batch) = 0;
  // Shutdown: tells the sender to stop; batches not yet received are dropped. Idempotent.
  virtual void close() = 0;
  // The slots' memory outlives this endpoint: it is left allocated (leaked) when the endpoint is
  // destroyed, because something made from a received batch is still referenced (a Python
  // script's tensor kept past feed.close(): runtime/train/batch_stream.h, LEASES). Once set, no
  // batch is written into the slots again.
  virtual void keep_slots_alive() = 0;
  virtual ChannelStats stats() const = 0;
};

// Both ends of one channel, made in one process (inproc, nccl loopback): a data thread sends,
// the trainer's thread receives.
struct ChannelPair {
  std::unique_ptr<SendChannel> sender;
  std::unique_ptr<ReceiveChannel> receiver;
};

}  // namespace sluice::transport
