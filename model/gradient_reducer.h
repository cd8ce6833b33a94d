#pragma once
// The seam between the trainer and whatever moves gradients between data-parallel ranks (MPI,
// NCCL, ...). No torch here; runtime/ implements it, model/ only calls it.
#include <cstddef>

namespace sluice::model {

// Protocol, per optimiser step (the micro-step that closes an accumulation window; the other
// micro-steps of the window accumulate locally and call nothing):
//   1. The trainer keeps every gradient in one flat float32 buffer, split into buckets of at
//      most bucket_bytes() in REVERSE parameter order (roughly the order backward produces them).
//      Bucket ids, offsets and sizes are identical on every rank (same model, same bucket_bytes).
//   2. During backward the trainer calls start(id, data, count) once for each id 0, 1, ..., n-1,
//      in increasing order, as soon as all gradients of that bucket are final. A bucket is never
//      started before a lower id, so every rank issues its collectives in the same order even if
//      autograd finishes gradients in a different order. Buckets whose gradients never arrive
//      (parameters unused by this batch; their gradient is zero) are started after backward.
//   3. After backward the trainer calls wait_all() once. On return every started bucket holds the
//      element-wise SUM over all ranks. The trainer then divides by world_size().
// Threads: start() may run on torch's autograd thread, not the thread that called train_step. It
// should hand the work off (non-blocking collective or a progress thread) rather than block for
// the whole reduction, or the overlap with backward is lost (correctness does not depend on it).
// Buffers: `data` stays valid and untouched by the trainer from start() until wait_all() returns.
// It is host memory unless accepts_device_memory() is true; then, for a CUDA trainer, it is
// device memory on the trainer's GPU whose producing kernels have already completed.
// Errors: start() and wait_all() throw sluice::TransportError; an implementation may defer an
// error from start() to wait_all(). After an error the trainer's gradients are undefined.
class GradientReducer {
 public:
  virtual ~GradientReducer() = default;

  virtual int world_size() const = 0;
  virtual int rank() const = 0;

  // Blocking in-place sum over all ranks. The one primitive every implementation must provide.
  virtual void all_reduce_sum(float* data, size_t count) = 0;

  // Asynchronous bucket reduction (see protocol above). The defaults reduce synchronously, which
  // is correct but exposes the whole reduction after backward.
  virtual void start(int bucket_id, float* data, size_t count) {
    (void)bucket_id;
    all_reduce_sum(data, count);
  }
  virtual void wait_all() {}

  // Bucket size cap in bytes; a transport may prefer another size (latency vs overlap).
  virtual size_t bucket_bytes() const { return size_t{25} << 20; }

  // True when an error left a started reduction unfinished (start() or all_reduce_sum() threw
  // while waiting). A non-blocking collective cannot be cancelled or freed (MPI forbids it; Open
  // MPI's libnbc crashed on the freed request in the next call's progress), so it may go on reading
  // and writing its buffers until the process ends: their owner keeps them (the Trainer's gradient
  // buffer is kept, not freed). The job is ending then: the error reaches the launcher, which aborts.
  virtual bool in_flight() const { return false; }

  // True when `data` may point to CUDA memory (CUDA-aware MPI, NCCL). Otherwise a CUDA trainer
  // stages each bucket through pinned host memory.
  virtual bool accepts_device_memory() const { return false; }
};

}  // namespace sluice::model
