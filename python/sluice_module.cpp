// sluice._sluice: the bindings behind `import sluice` (python/sluice/__init__.py). Bindings only:
// the model rank itself is runtime/train/embedded_model_rank.h. docs/python.md is the user's view.
//
// A batch's sections leave as DLPack producers (__dlpack__ / __dlpack_device__) that view the
// receive slot in place. Each DLPack tensor holds the batch's lease (runtime/train/batch_stream.h,
// LEASES), so its slot goes back to the data rank only once the step ended and every tensor made
// from it was freed: a kept tensor never shows another batch's bytes. A section asked of a batch
// after the feed moved on raises.
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#ifdef SLUICE_PYTHON_EMBEDDED
#include <pybind11/embed.h>
#endif

#include "common/error.h"
#include "common/host.h"
#include "common/mpi_session.h"
#include "common/stop_signal.h"
#include "python/dlpack_abi.h"
#include "runtime/train/embedded_model_rank.h"
#include "timing/span_recorder.h"
#include "timing/stage.h"

namespace py = pybind11;
using sluice::runtime::BatchHeader;
using sluice::runtime::BatchStream;
using sluice::runtime::EmbeddedModelRank;
using sluice::runtime::StreamBatch;

namespace {

// The process's MPI session, made by the first Feed and ended by shutdown() at exit.
struct Process {
  std::unique_ptr<sluice::MpiSession> session;
  // Why the job must be ended at exit (an error other ranks may wait on, or a feed left open);
  // empty: MPI is finalised normally.
  std::string abort_reason;
  int open_feeds = 0;
};

Process& process() {
  static Process* p = new Process;  // never destroyed: shutdown() ends it, before the interpreter goes
  return *p;
}

// A released batch's views must not be taken: the slot holds another batch by then.
struct Generation {
  std::shared_ptr<std::atomic<uint64_t>> counter = std::make_shared<std::atomic<uint64_t>>(0);
};

struct Section {
  const void* data = nullptr;
  DLDevice device{kDLCPU, 0};
  DLDataType dtype{kDLFloat, 32, 1};
  std::vector<int64_t> shape;
  std::shared_ptr<std::atomic<uint64_t>> generation;
  uint64_t issued = 0;
  int64_t step = 0;
  std::weak_ptr<const void> lease;  // the batch's slot (or validation bytes): held by each tensor

  void check_live() const {
    if (generation->load() != issued) {
      throw sluice::Error(sluice::ErrorKind::internal,
                          "the batch of global step " + std::to_string(step) +
                              " was released (the feed moved on to the next batch or was closed): a batch's "
                              "tensors are valid until the next batch is asked for; .clone() what you keep");
    }
  }

  struct Holder {
    DLManagedTensor managed{};
    std::vector<int64_t> shape;
    std::shared_ptr<const void> lease;  // dropped by the deleter, on whichever thread frees the tensor
  };

  // A new DLManagedTensor viewing the section; its deleter frees the descriptor and drops its
  // hold on the slot (the slot itself belongs to the feed, which gives it back).
  py::capsule dlpack(const py::object& /*stream*/) const {
    check_live();
    auto* holder = new Holder;
    holder->shape = shape;
    holder->lease = lease.lock();
    DLTensor& t = holder->managed.dl_tensor;
    t.data = const_cast<void*>(data);
    t.device = device;
    t.ndim = static_cast<int32_t>(holder->shape.size());
    t.dtype = dtype;
    t.shape = holder->shape.data();
    t.strides = nullptr;
    t.byte_offset = 0;
    holder->managed.manager_ctx = holder;
    holder->managed.deleter = [](DLManagedTensor* self) { delete static_cast<Holder*>(self->manager_ctx); };
    // A capsule never consumed still frees its descriptor; a consumer renames it "used_dltensor".
    return py::capsule(&holder->managed, "dltensor", [](PyObject* capsule) {
      if (PyCapsule_IsValid(capsule, "dltensor")) {
        auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
        managed->deleter(managed);
      }
    });
  }

  py::tuple dlpack_device() const { return py::make_tuple(static_cast<int>(device.device_type), device.device_id); }
};

struct BatchHandle {
  StreamBatch batch;
  std::shared_ptr<std::atomic<uint64_t>> generation;
  uint64_t issued = 0;
  std::weak_ptr<const void> lease;  // not held here: a Batch object kept does not keep its slot

  // The batch's header, in its receive slot, refused once the batch was released: the slot may
  // hold another batch, or be gone after close(). Every section reads it for its shape first, so a
  // released batch's section raises (issue 27: batch.dlpack(name) on a released batch did not, as
  // docs/python.md says it does).
  const BatchHeader& header() const {
    section_of_step().check_live();
    return *batch.host.header;
  }

  Section section(const void* host, const void* device_data, DLDataType dtype, std::vector<int64_t> shape) const {
    Section s = section_of_step();
    const bool on_gpu = batch.gpu >= 0 && device_data != nullptr;
    s.data = on_gpu ? device_data : host;
    s.device = on_gpu ? DLDevice{kDLCUDA, batch.gpu} : DLDevice{kDLCPU, 0};
    s.dtype = dtype;
    s.shape = std::move(shape);
    return s;
  }
  int64_t size() const { return header().batch_size; }
  int64_t max_tokens() const { return header().max_tokens; }
  int64_t max_frames() const { return header().max_frames; }
  int64_t n_mels() const { return header().n_mels; }

 private:
  // An empty section carrying this batch's generation (what Section::check_live compares).
  Section section_of_step() const {
    Section s;
    s.generation = generation;
    s.issued = issued;
    s.step = batch.global_step;
    s.lease = lease;
    return s;
  }
};

constexpr DLDataType int32_type{kDLInt, 32, 1}, int64_type{kDLInt, 64, 1}, float32_type{kDLFloat, 32, 1};

// One model rank of the job, as the Python Feed sees it.
class FeedHandle {
 public:
  FeedHandle(const std::string& config, const std::vector<std::string>& overrides, int64_t resume_step) {
    Process& p = process();
    if (!p.session) p.session = std::make_unique<sluice::MpiSession>(nullptr, nullptr);
    if (p.open_feeds > 0) {
      throw sluice::ConfigError("this process already has an open sluice.Feed: one feed per Python rank");
    }
    sluice::runtime::EmbeddedOptions options;
    options.config_file = config;
    options.overrides = overrides;
    options.own_config = !config.empty() || !overrides.empty();
    options.resume_step = resume_step;
    try {
      py::gil_scoped_release unlocked;
      rank_ = std::make_unique<EmbeddedModelRank>(*p.session, std::move(options));
    } catch (const sluice::Error& error) {
      // A config error is the same on every rank (job_agreement.h): nobody waits. Anything else
      // may leave other ranks waiting: the job ends at exit, as sluice ends it.
      if (error.kind() != sluice::ErrorKind::config) p.abort_reason = error.what();
      throw;
    }
    ++p.open_feeds;
  }

  ~FeedHandle() {
    if (rank_ && !closed_) {
      process().abort_reason = "the script ended without closing its sluice.Feed (feed.close())";
      --process().open_feeds;
      py::gil_scoped_release unlocked;
      rank_.reset();
    }
  }

  std::optional<BatchHandle> next() {
    check_open();
    ++*generation_;  // the previous batch's views die with its slot
    std::optional<StreamBatch> batch;
    try {
      py::gil_scoped_release unlocked;
      batch = rank_->stream().next();
    } catch (...) {
      failed(std::current_exception());
      throw;
    }
    if (!batch) return std::nullopt;
    return BatchHandle{*batch, generation_, generation_->load(), rank_->stream().lease()};
  }

  // Validation batches (batch_stream.h, VALIDATION) have their own generation: a validation batch
  // dies with the next one, the training batch of the step stays valid.
  void start_validation() {
    check_open();
    ++*validation_generation_;
    py::gil_scoped_release unlocked;
    rank_->stream().start_validation();
  }

  std::optional<BatchHandle> next_validation() {
    check_open();
    ++*validation_generation_;
    std::optional<StreamBatch> batch;
    {
      py::gil_scoped_release unlocked;
      batch = rank_->stream().next_validation();
    }
    if (!batch) return std::nullopt;
    return BatchHandle{*batch, validation_generation_, validation_generation_->load(),
                       rank_->stream().validation_lease()};
  }

  void end_validation() {
    if (closed_ || failed_) return;  // called from a generator's finally, after close() too
    ++*validation_generation_;
    rank_->stream().end_validation();
  }

  bool validation_due(int64_t done) {
    check_open();
    return rank_->stream().validation_due(done);
  }

  // The script's loss (batch_stream.h, STOP AGREEMENT): a non-finite one stops every model rank.
  void report_loss(double loss) {
    check_open();
    rank_->stream().report_loss(loss);
  }

  // The global step a stop signal ended the feed at (the first not handed out), or None.
  py::object stopped_at() const {
    if (!rank_ || rank_->stream().stopped_at() < 0) return py::none();
    return py::int_(rank_->stream().stopped_at());
  }

  void mark(const std::string& stage_name, int64_t start_ns, int64_t end_ns) {
    check_open();
    const auto stage = sluice::timing::stage_from_string(stage_name);
    if (!stage) {
      throw sluice::ConfigError("feed.span(\"" + stage_name +
                                "\"): not a stage name; a model rank's are forward, backward, allreduce_exposed, "
                                "optimizer, sync, validation, checkpoint");
    }
    rank_->stream().mark(*stage, start_ns, end_ns);
  }

  // Ends the model side; the rank's timeline joins the others, rank 0 writes the report.
  int close() {
    if (closed_) return exit_code_;
    check_open();
    ++*generation_;
    ++*validation_generation_;
    closed_ = true;
    --process().open_feeds;
    try {
      py::gil_scoped_release unlocked;
      exit_code_ = rank_->finish();
    } catch (const sluice::Error& error) {
      if (error.kind() != sluice::ErrorKind::config) process().abort_reason = error.what();
      throw;
    }
    return exit_code_;
  }

  const sluice::runtime::ModelRankInfo& info() const { return rank_->info(); }
  // Each cache index's language and speaker (positions in info's languages and speakers).
  std::pair<std::vector<int64_t>, std::vector<int64_t>> labels(const std::vector<int64_t>& indices) const {
    const auto& i = info();
    std::pair<std::vector<int64_t>, std::vector<int64_t>> out;
    for (int64_t index : indices) {
      if (index < 0 || static_cast<size_t>(index) >= i.sample_language.size()) {
        throw sluice::Error(sluice::ErrorKind::internal, "cache index " + std::to_string(index) + " is outside the run's " +
                                                             std::to_string(i.sample_language.size()) + " samples");
      }
      out.first.push_back(i.sample_language[static_cast<size_t>(index)]);
      out.second.push_back(i.sample_speaker[static_cast<size_t>(index)]);
    }
    return out;
  }
  int64_t done() const { return rank_->stream().done(); }
  bool closed() const { return closed_; }

 private:
  void check_open() const {
    if (closed_) throw sluice::Error(sluice::ErrorKind::internal, "the sluice.Feed is closed");
    if (failed_) throw sluice::Error(sluice::ErrorKind::internal, "the sluice.Feed failed: " + failure_);
  }

  void failed(std::exception_ptr error) {
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      failure_ = e.what();
    }
    failed_ = true;
    process().abort_reason = failure_;
    py::gil_scoped_release unlocked;
    rank_->fail(error);  // the rank's timeline records the failure
  }

  std::unique_ptr<EmbeddedModelRank> rank_;
  std::shared_ptr<std::atomic<uint64_t>> generation_ = std::make_shared<std::atomic<uint64_t>>(0);
  std::shared_ptr<std::atomic<uint64_t>> validation_generation_ = std::make_shared<std::atomic<uint64_t>>(0);
  bool closed_ = false, failed_ = false;
  std::string failure_;
  int exit_code_ = 0;
};

// At interpreter exit (atexit): finalise MPI, or end the whole job when this rank failed in a
// way other ranks may be waiting on (what `sluice train` does after such an error).
void shutdown() {
  Process& p = process();
  if (!p.session) return;
  if (p.open_feeds > 0 && p.abort_reason.empty()) {
    p.abort_reason = "the script ended without closing its sluice.Feed (feed.close())";
  }
  if (!p.abort_reason.empty() && p.session->size() > 1) {
    std::fprintf(stderr, "sluice: rank %d ends the job (MPI_Abort): %s\n", p.session->rank(), p.abort_reason.c_str());
    std::fflush(stderr);
    p.session->abort(1);
  }
  p.session.reset();
}

void register_errors(py::module_& m) {
  static py::exception<sluice::Error> error(m, "Error");
  static py::exception<sluice::ConfigError> config(m, "ConfigError", error.ptr());
  static py::exception<sluice::DataError> data(m, "DataError", error.ptr());
  static py::exception<sluice::CacheError> cache(m, "CacheError", error.ptr());
  static py::exception<sluice::TransportError> transport(m, "TransportError", error.ptr());
  py::register_exception_translator([](std::exception_ptr pointer) {
    try {
      if (pointer) std::rethrow_exception(pointer);
    } catch (const sluice::Error& e) {
      PyObject* type = e.kind() == sluice::ErrorKind::config      ? config.ptr()
                       : e.kind() == sluice::ErrorKind::data      ? data.ptr()
                       : e.kind() == sluice::ErrorKind::cache     ? cache.ptr()
                       : e.kind() == sluice::ErrorKind::transport ? transport.ptr()
                                                                  : error.ptr();
      PyErr_SetString(type, e.what());
    }
  });
}

}  // namespace

#ifdef SLUICE_PYTHON_EMBEDDED
PYBIND11_EMBEDDED_MODULE(_sluice, m) {  // sluice-python: built in, registered before Py_BytesMain
#else
PYBIND11_MODULE(_sluice, m) {  // the extension module (SLUICE_PYTHON_EXTENSION)
#endif
  m.doc() = "sluice's Python model ranks (docs/python.md); use the `sluice` package, not this module";
  register_errors(m);
  m.def("_shutdown", &shutdown);
  // sys.excepthook's note (python/sluice/__init__.py): the exception that is ending the script,
  // so that the job's end names it instead of the feed it left open.
  m.def("_script_raised", [](const std::string& what) {
    Process& p = process();
    if (p.open_feeds > 0 && p.abort_reason.empty()) {
      p.abort_reason = "the script raised " + what + " (its traceback is above) with its sluice.Feed open";
    }
  });
  m.def("now_ns", &sluice::timing::now_ns, "the clock of the timeline's spans (CLOCK_MONOTONIC, ns)");
  m.def("allocator", &sluice::allocator_in_use, "the C allocator this process runs with (tcmalloc, jemalloc, system)");

  py::class_<Section>(m, "Section", "one section of a batch in its receive slot, for DLPack consumers")
      .def("__dlpack__", &Section::dlpack, py::arg("stream") = py::none())
      .def("__dlpack_device__", &Section::dlpack_device)
      .def_property_readonly("shape", [](const Section& s) { return s.shape; });

  py::class_<BatchHandle>(m, "BatchHandle")
      .def_property_readonly("global_step", [](const BatchHandle& b) { return b.batch.global_step; })
      .def_property_readonly("epoch", [](const BatchHandle& b) { return b.batch.epoch; })
      .def_property_readonly("step", [](const BatchHandle& b) { return b.batch.step; })
      .def_property_readonly("size", &BatchHandle::size)
      .def_property_readonly("bucket", [](const BatchHandle& b) { return b.header().bucket; })
      .def_property_readonly("indices", [](const BatchHandle& b) {
        return b.section(b.batch.host.indices, b.batch.device.indices, int64_type, {b.size()});
      })
      .def_property_readonly("token_lens", [](const BatchHandle& b) {
        return b.section(b.batch.host.token_lens, b.batch.device.token_lens, int32_type, {b.size()});
      })
      .def_property_readonly("mel_lens", [](const BatchHandle& b) {
        return b.section(b.batch.host.mel_lens, b.batch.device.mel_lens, int32_type, {b.size()});
      })
      .def_property_readonly("tokens", [](const BatchHandle& b) {
        return b.section(b.batch.host.tokens, b.batch.device.tokens, int32_type, {b.size(), b.max_tokens()});
      })
      .def_property_readonly("mels", [](const BatchHandle& b) {
        return b.section(b.batch.host.mels, b.batch.device.mels, float32_type, {b.size(), b.max_frames(), b.n_mels()});
      });

  py::class_<FeedHandle>(m, "FeedHandle")
      .def(py::init<const std::string&, const std::vector<std::string>&, int64_t>(), py::arg("config"),
           py::arg("overrides"), py::arg("resume_step"))
      .def("next", &FeedHandle::next)
      .def("mark", &FeedHandle::mark)
      .def("report_loss", &FeedHandle::report_loss)
      .def("start_validation", &FeedHandle::start_validation)
      .def("next_validation", &FeedHandle::next_validation)
      .def("end_validation", &FeedHandle::end_validation)
      .def("validation_due", &FeedHandle::validation_due)
      .def_property_readonly("stopped_at", &FeedHandle::stopped_at)
      .def_property_readonly("stop_signal", [](const FeedHandle&) {
        return sluice::stop_requested() ? py::object(py::str(sluice::stop_signal_name())) : py::object(py::none());
      })
      .def("labels", &FeedHandle::labels)
      .def("close", &FeedHandle::close)
      .def_property_readonly("closed", &FeedHandle::closed)
      .def_property_readonly("done", &FeedHandle::done)
      .def_property_readonly("info", [](const FeedHandle& f) {
        const auto& i = f.info();
        const sluice::MpiSession& s = *process().session;
        py::dict d;
        d["rank"] = i.model_index;
        d["world_size"] = i.model_ranks;
        d["gpu"] = i.gpu;
        d["rendezvous"] = i.rendezvous;
        d["first_step"] = i.first_step;
        d["end_step"] = i.end_step;
        d["steps_per_epoch"] = i.steps_per_epoch;
        d["data_rank"] = i.data_rank;
        d["vocab_size"] = i.vocab_size;
        d["n_mels"] = i.n_mels;
        d["transport"] = i.transport;
        d["run_dir"] = i.run_dir;
        d["validation_every"] = i.validation_every;
        d["validation_samples"] = i.validation_samples;
        d["compute_threads"] = i.compute_threads;
        d["corpora"] = i.corpora;
        d["corpus_starts"] = i.corpus_starts;
        d["languages"] = i.languages;
        d["speakers"] = i.speakers;
        d["mpi_rank"] = s.rank();
        d["mpi_size"] = s.size();
        d["host"] = s.host();
        return d;
      });
}
