#include "runtime/prep/shard_builder.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <limits>
#include <mutex>
#include <optional>
#include <thread>

#include <nlohmann/json.hpp>

#include "cache/cache_verifier.h"
#include "cache/shard_reader.h"
#include "common/clock.h"
#include "common/finite.h"
#include "common/log.h"
#include "dataset/audio.h"
#include "dataset/language.h"
#include "dataset/phonemizer.h"
#include "dataset/reject.h"
#include "timing/span_recorder.h"

namespace sluice::runtime {
namespace {


void record_span(timing::Stage stage, int64_t start_ns, int64_t end_ns, int64_t row) {
  timing::Span span;
  span.stage = stage;
  span.start_ns = start_ns;
  span.end_ns = end_ns;
  span.step = row;
  timing::SpanRecorder::global().record(span);
}


// Finite audio can still give a log-mel that is not: samples far beyond +-1 (a float WAV holding
// 1e30) square to infinity in the power spectrum. Such a clip is one bad input, rejected like
// any other, rather than a failure of the shard (whose writer refuses non-finite values).
void check_finite_features(const std::filesystem::path& audio_file, const std::vector<float>& audio,
                           const std::vector<float>& mel, int n_mels) {
  const auto values = static_cast<int64_t>(mel.size());
  const int64_t at = first_non_finite(mel.data(), values);
  if (at == values) return;
  const float bad = mel[static_cast<size_t>(at)];
  float peak = 0.0f;
  for (float sample : audio) peak = std::max(peak, std::fabs(sample));
  char detail[512];
  std::snprintf(detail, sizeof(detail),
                "the log-mel of %s is %s at frame %lld, bin %lld: its largest sample is %g (speech is "
                "within +-1); rescale the file",
                audio_file.c_str(), std::isnan(bad) ? "NaN" : "infinite", static_cast<long long>(at / n_mels),
                static_cast<long long>(at % n_mels), static_cast<double>(peak));
  throw dataset::SampleRejected(dataset::RejectReason::non_finite_features, detail);
}

// One corpus row, processed: either a sample to append or a reject to record.
struct ItemResult {
  std::optional<dataset::RejectReason> reject;
  std::string detail;
  std::string text;      // normalised
  std::string language;
  std::vector<float> mel;
  int64_t n_frames = 0;
  std::vector<int32_t> tokens;
  double seconds = 0;
};

// A contiguous run of rows that ends in one shard file.
struct ShardTask {
  int64_t shard = 0;
  int64_t begin = 0;  // first task index of this shard in the rank's task list
  int64_t end = 0;
};

}  // namespace

struct ShardBuilder::State {
  const dataset::CorpusListing& listing;
  const PrepPlan& plan;
  BuildSettings settings;
  const dataset::Vocabulary& vocabulary;
  dataset::MelExtractor mel;
  dataset::TextNormalizer normalizer;
  std::unique_ptr<dataset::Phonemizer> phonemizer;

  BuildProgress progress;
  BuildResult result;
  Clock::time_point started;

  // Everything below up to `spare_mels` is guarded by `mutex`.
  std::mutex mutex;
  // Shards added and not yet taken in; closed: none will be added any more.
  std::deque<int64_t> intake;
  bool intake_closed = false;
  // The rank's rows in write order, and the shards they form; they grow as shards are taken in
  // (read them under the mutex). tasks_closed: the intake has ended, nothing will be appended.
  std::vector<int64_t> rows;
  std::vector<ShardTask> shard_tasks;
  bool tasks_closed = false;

  // Who waits for what, one condition each: a notify wakes only the threads that wait for it (with
  // one condition for all, every row woke the intake thread twice for nothing: 0.3 CPU-s of
  // futex calls and context switches per 20,000 rows).
  std::condition_variable work_ready;      // workers: rows to take, a free slot, the end
  std::condition_variable slot_filled;     // the writer: a finished row, a new shard, the end
  std::condition_variable intake_changed;  // the intake thread: a shard added, the intake closed

  // Reorder window between workers and the writer.
  std::vector<std::optional<ItemResult>> slots;
  int64_t next_task = 0;   // next row index a worker takes
  int64_t written = 0;     // rows the writer has consumed
  bool stopping = false;
  std::exception_ptr error;
  // Mel buffers the writer is done with, for the workers' next rows: a fresh buffer per row cost
  // its allocation, zero-fill and page faults (mel buffers of 10 s clips pass glibc's mmap
  // threshold). At most window + workers of them exist; a rare huge one is not kept.
  std::vector<std::vector<float>> spare_mels;
  static constexpr size_t kMaxSpareMelValues = size_t{2} << 20;  // 8 MiB: a 75 s clip at 80 mels

  std::atomic<int64_t> decode_ns{0}, text_ns{0}, features_ns{0}, write_ns{0};
  std::mutex unknown_mutex;
  std::vector<std::thread> threads;
  std::atomic<int> worker_ids{0};
  std::atomic<bool> finished{false};
  std::atomic<int> running{0};

  State(const dataset::CorpusListing& listing_, const PrepPlan& plan_, BuildSettings settings_,
        const dataset::Vocabulary& vocabulary_)
      : listing(listing_), plan(plan_), settings(std::move(settings_)), vocabulary(vocabulary_),
        mel(settings.mel), normalizer(settings.text) {
    if (settings.tokenizer == "phonemes") phonemizer = std::make_unique<dataset::Phonemizer>();
  }

  size_t window() const { return slots.size(); }

  void fail(std::exception_ptr failure) {
    std::lock_guard<std::mutex> lock(mutex);
    if (!error) error = failure;
    stopping = true;
    wake_all();
  }

  // The shard tasks changed (one added, or no more to come): the workers and the writer look.
  void tasks_changed() {
    work_ready.notify_all();
    slot_filled.notify_all();
  }

  void wake_all() {
    tasks_changed();
    intake_changed.notify_all();
  }

  // A transcript far longer than its clip can say (a 100 KB text on a 4.5 s clip once became 102,399
  // tokens and an allocation of 156 GiB on every model rank) is a reject, not a training failure.
  void check_token_count(size_t tokens, double seconds) const {
    const auto count = static_cast<int64_t>(tokens);
    if (count > settings.max_tokens) {
      throw dataset::SampleRejected(dataset::RejectReason::too_many_tokens,
                                    std::to_string(count) + " tokens > prep.max_tokens " +
                                        std::to_string(settings.max_tokens));
    }
    const double per_second = static_cast<double>(count) / std::max(seconds, 1e-3);
    if (per_second > settings.max_tokens_per_second) {
      char detail[200];
      std::snprintf(detail, sizeof(detail),
                    "%lld tokens for %.2f s of audio: %.1f a second > prep.max_tokens_per_second %g (is the text "
                    "this clip's?)",
                    static_cast<long long>(count), seconds, per_second, settings.max_tokens_per_second);
      throw dataset::SampleRejected(dataset::RejectReason::too_many_tokens, detail);
    }
  }

  // `audio` is the worker's decode buffer, reused from row to row (its contents are this row's
  // samples on return); `mel_buffer` becomes the result's mel (its capacity reused).
  ItemResult process(int64_t row, dataset::UnknownCounts& unknown, std::vector<float>& audio,
                     std::vector<float> mel_buffer) {
    const auto& item = listing.items[static_cast<size_t>(row)];
    ItemResult out;
    out.mel = std::move(mel_buffer);
    try {
      if (item.reject) throw dataset::SampleRejected(*item.reject, item.reject_detail);
      // The probed duration decides length rejects before any decoding is spent on them.
      const double probed = plan.item_seconds[static_cast<size_t>(row)];
      if (probed > 0 && probed < settings.min_seconds) {
        throw dataset::SampleRejected(dataset::RejectReason::too_short,
                                      std::to_string(probed) + " s < prep.min_seconds " +
                                          std::to_string(settings.min_seconds));
      }
      if (probed > settings.max_seconds) {
        throw dataset::SampleRejected(dataset::RejectReason::too_long,
                                      std::to_string(probed) + " s > prep.max_seconds " +
                                          std::to_string(settings.max_seconds));
      }

      auto start = Clock::now();
      const int64_t decode_start_ns = timing::now_ns();
      dataset::AudioLoadSeconds load;
      dataset::load_audio(item.audio, settings.mel.sample_rate, audio, &load);
      settings.delay.apply(timing::Stage::decode, settings.rank, row);
      decode_ns += nanoseconds_since(start);
      record_span(timing::Stage::decode, decode_start_ns, decode_start_ns + static_cast<int64_t>(load.decode * 1e9), row);
      if (load.resample > 0) {
        const int64_t at = decode_start_ns + static_cast<int64_t>(load.decode * 1e9);
        record_span(timing::Stage::resample, at, at + static_cast<int64_t>(load.resample * 1e9), row);
      }
      out.seconds = static_cast<double>(audio.size()) / settings.mel.sample_rate;
      if (out.seconds < settings.min_seconds ||
          static_cast<int64_t>(audio.size()) < mel.min_samples()) {
        throw dataset::SampleRejected(dataset::RejectReason::too_short,
                                      std::to_string(out.seconds) + " s after decoding");
      }

      start = Clock::now();
      timing::ScopedSpan features_span(timing::Stage::features, row);
      out.language = item.language.empty() ? dataset::detect_language(item.text) : item.language;
      try {
        out.text = normalizer.normalize(item.text, out.language);
      } catch (const dataset::SampleRejected&) {
        throw;
      } catch (const DataError& bad_text) {
        throw dataset::SampleRejected(dataset::RejectReason::invalid_text, bad_text.what());
      }
      if (out.text.empty()) {
        throw dataset::SampleRejected(dataset::RejectReason::empty_text,
                                      "no text is left after normalisation");
      }
      std::string symbols = out.text;
      if (phonemizer) {
        try {
          symbols = phonemizer->phonemize(out.text, out.language);
        } catch (const DataError& no_voice) {
          throw dataset::SampleRejected(dataset::RejectReason::unsupported_language, no_voice.what());
        }
      }
      out.tokens = vocabulary.encode(symbols, unknown);
      check_token_count(out.tokens.size(), out.seconds);
      text_ns += nanoseconds_since(start);

      start = Clock::now();
      mel.compute(audio.data(), static_cast<int64_t>(audio.size()), out.mel);
      out.n_frames = mel.n_frames(static_cast<int64_t>(audio.size()));
      check_finite_features(item.audio, audio, out.mel, settings.mel.n_mels);
      settings.delay.apply(timing::Stage::features, settings.rank, row);
      features_ns += nanoseconds_since(start);
    } catch (const dataset::SampleRejected& rejected) {
      out.reject = rejected.reason();
      out.detail = rejected.detail();
    }
    return out;
  }

  void worker() {
    timing::SpanRecorder::global().name_this_thread("worker " + std::to_string(worker_ids++));
    dataset::UnknownCounts unknown;
    std::vector<float> audio;
    try {
      while (true) {
        int64_t task = 0, row = 0;
        std::vector<float> mel_buffer;
        {
          std::unique_lock<std::mutex> lock(mutex);
          const auto all_taken = [&] { return next_task >= static_cast<int64_t>(rows.size()); };
          work_ready.wait(lock, [&] {
            return stopping || (all_taken() && tasks_closed) ||
                   (!all_taken() && next_task < written + static_cast<int64_t>(window()));
          });
          if (stopping || all_taken()) break;
          task = next_task++;
          row = rows[static_cast<size_t>(task)];
          if (!spare_mels.empty()) {
            mel_buffer = std::move(spare_mels.back());
            spare_mels.pop_back();
          }
        }
        ItemResult item = process(row, unknown, audio, std::move(mel_buffer));
        {
          std::lock_guard<std::mutex> lock(mutex);
          slots[static_cast<size_t>(task) % window()] = std::move(item);
        }
        slot_filled.notify_one();  // only the writer waits for it
      }
    } catch (...) {
      fail(std::current_exception());
    }
    std::lock_guard<std::mutex> lock(unknown_mutex);
    for (const auto& [code_point, count] : unknown) result.unknown[code_point] += count;
    result.cpu.workers += thread_cpu_seconds();
  }

  std::string reject_line(int64_t row, int64_t shard, const ItemResult& item) const {
    const auto& source = listing.items[static_cast<size_t>(row)];
    nlohmann::json line = {{"id", source.id},
                           {"source", source.source},
                           {"audio", source.audio.string()},
                           {"text", dataset::text_excerpt(source.text)},
                           {"reason", dataset::to_string(*item.reject)},
                           {"detail", item.detail},
                           {"shard", shard}};
    // A row's text may hold bytes that are not UTF-8 (an invalid_text reject): replace them
    // rather than fail the shard.
    return line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }

  void writer() {
    struct CountCpu {
      ThreadCpuSeconds& cpu;
      ~CountCpu() { cpu.writer = thread_cpu_seconds(); }
    } count_cpu{result.cpu};
    timing::SpanRecorder::global().name_this_thread("writer");
    std::vector<float> done_with;  // the last row's mel, handed back to the workers at the next row
    try {
      for (size_t index = 0;; ++index) {
        ShardTask shard_task;
        {
          std::unique_lock<std::mutex> lock(mutex);
          slot_filled.wait(lock, [&] { return stopping || index < shard_tasks.size() || tasks_closed; });
          if (stopping || index >= shard_tasks.size()) return;
          shard_task = shard_tasks[index];
        }
        const auto path = settings.cache_dir / cache::shard_file_name(shard_task.shard);
        cache::ShardWriter shard(path, static_cast<int>(shard_task.shard), settings.mel.n_mels,
                                 plan.fingerprint, settings.writer);
        ShardOutcome outcome{shard_task.shard, false, 0, 0};
        for (int64_t task = shard_task.begin; task < shard_task.end; ++task) {
          ItemResult item;
          int64_t row = 0;
          {
            std::unique_lock<std::mutex> lock(mutex);
            if (done_with.capacity() > 0 && done_with.capacity() <= kMaxSpareMelValues) {
              spare_mels.push_back(std::move(done_with));
            }
            done_with = {};
            auto& slot = slots[static_cast<size_t>(task) % window()];
            slot_filled.wait(lock, [&] { return stopping || slot.has_value(); });
            if (stopping) return;  // the shard's temp file is removed by ~ShardWriter
            item = std::move(*slot);
            slot.reset();
            ++written;
            row = rows[static_cast<size_t>(task)];
          }
          work_ready.notify_all();  // a slot is free

          const auto start = Clock::now();
          timing::ScopedSpan write_span(timing::Stage::write, row);
          if (item.reject) {
            shard.add_reject(reject_line(row, shard_task.shard, item));
            ++outcome.rejects;
            ++result.reject_reasons[dataset::to_string(*item.reject)];
            ++progress.rejects;
          } else {
            const auto& source = listing.items[static_cast<size_t>(row)];
            cache::ShardSample sample;
            sample.id = source.id;
            sample.text = item.text;
            sample.language = item.language;
            sample.speaker = source.speaker;
            sample.mel = item.mel.data();
            sample.n_frames = item.n_frames;
            sample.tokens = item.tokens.data();
            sample.n_tokens = static_cast<int64_t>(item.tokens.size());
            sample.seconds = item.seconds;
            shard.append(sample);
            const int64_t mel_bytes = item.n_frames * settings.mel.n_mels * settings.writer.mel_value_bytes();
            write_span.set_bytes(mel_bytes);
            result.writer.mel_bytes += mel_bytes;
            ++outcome.samples;
            result.frames += item.n_frames;
            result.audio_seconds += item.seconds;
          }
          done_with = std::move(item.mel);
          settings.delay.apply(timing::Stage::write, settings.rank, row);
          write_ns += nanoseconds_since(start);
          ++progress.items;
          progress.audio_ms += static_cast<int64_t>(plan.item_seconds[static_cast<size_t>(row)] * 1000);
        }
        const auto start = Clock::now();
        timing::ScopedSpan commit_span(timing::Stage::write, -1);
        shard.commit();
        write_ns += nanoseconds_since(start);
        std::lock_guard<std::mutex> lock(mutex);
        result.samples += outcome.samples;
        result.rejects += outcome.rejects;
        result.shards.push_back(outcome);
      }
    } catch (...) {
      fail(std::current_exception());
    }
  }

  // Takes the added shards in, in order: keeps a complete one from an earlier run (after reading
  // every checksum: this is why it is a thread), queues the rows of the others for the workers.
  void take_in() {
    try {
      while (true) {
        int64_t shard = 0;
        {
          std::unique_lock<std::mutex> lock(mutex);
          intake_changed.wait(lock, [&] { return stopping || !intake.empty() || intake_closed; });
          if (stopping) return;
          if (intake.empty()) {
            tasks_closed = true;
            tasks_changed();
            return;
          }
          shard = intake.front();
        }
        const int64_t begin = plan.shard_begin(shard), end = plan.shard_end(shard);
        const auto path = settings.cache_dir / cache::shard_file_name(shard);
        std::optional<ShardOutcome> kept;
        if (keep_finished_shard(path)) {
          cache::ShardReader reader(path);
          kept = ShardOutcome{shard, true, reader.size(), static_cast<int64_t>(reader.read_columns().rejects.size())};
        }
        {
          std::lock_guard<std::mutex> lock(mutex);
          intake.pop_front();  // only now: shards_ahead() counts it until its rows are queued
          if (kept) {
            result.shards.push_back(*kept);
            progress.items += end - begin;
            progress.audio_ms += shard_audio_ms(shard);
          } else {
            const int64_t first = static_cast<int64_t>(rows.size());
            for (int64_t row = begin; row < end; ++row) rows.push_back(row);
            shard_tasks.push_back({shard, first, static_cast<int64_t>(rows.size())});
          }
        }
        tasks_changed();
      }
    } catch (...) {
      fail(std::current_exception());
    }
  }

  int64_t shard_audio_ms(int64_t shard) const {
    int64_t audio_ms = 0;
    for (int64_t row = plan.shard_begin(shard); row < plan.shard_end(shard); ++row) {
      audio_ms += static_cast<int64_t>(plan.item_seconds[static_cast<size_t>(row)] * 1000);
    }
    return audio_ms;
  }

  // A shard from an earlier run is kept only when it is complete, made with this run's
  // fingerprint, and sound: every chunk's checksum and the strings' digest are read, as by
  // `sluice cache verify`. A damaged one (bytes flipped on disk) is rebuilt, and the log says so.
  bool keep_finished_shard(const std::filesystem::path& path) const {
    if (!cache::is_complete_shard(path, plan.fingerprint)) return false;
    const cache::VerifyResult check = cache::verify_shard(path, plan.fingerprint);
    if (check.ok()) return true;
    const cache::VerifyFault& first = check.faults.front();
    log::get("runtime")->warn("{} from an earlier run is damaged ({}{}{}); rebuilding it", path.string(),
                              first.sample_id.empty() ? "" : "sample " + first.sample_id + ": ", first.problem,
                              check.faults.size() > 1 ? " and " + std::to_string(check.faults.size() - 1) + " more" : "");
    return false;
  }

  void join() {
    for (auto& thread : threads) {
      if (thread.joinable()) thread.join();
    }
  }
};

ShardBuilder::ShardBuilder(const dataset::CorpusListing& listing, const PrepPlan& plan,
                           BuildSettings settings, const dataset::Vocabulary& vocabulary)
    : state_(std::make_unique<State>(listing, plan, std::move(settings), vocabulary)) {}

ShardBuilder::~ShardBuilder() {
  if (!state_) return;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->stopping = true;
  }
  state_->wake_all();
  state_->join();
}

void ShardBuilder::start() {
  State& s = *state_;
  s.started = Clock::now();
  const int workers = std::max(1, s.settings.threads);
  // Enough finished items to keep every worker busy while the writer commits a shard: the
  // commit (columns, strings, close, fsync of the file and the directory) took 5-20 ms here,
  // while a worker finishes a 4 s clip in ~0.5 ms, so 12 slots (4 per worker + 8) left the
  // workers waiting at every commit. 64 rows of mels are ~7 MB at 4 s per clip.
  s.slots.resize(static_cast<size_t>(std::max(64, 4 * workers + 8)));
  s.running = workers + 2;
  s.result.writer.workers = workers;
  auto run = [&s](void (State::*body)()) {
    return std::thread([&s, body] {
      (s.*body)();
      if (--s.running == 0) s.finished = true;
    });
  };
  for (int i = 0; i < workers; ++i) s.threads.push_back(run(&State::worker));
  s.threads.push_back(run(&State::writer));
  s.threads.push_back(run(&State::take_in));
}

void ShardBuilder::add(int64_t shard) {
  State& s = *state_;
  s.progress.total_items += s.plan.shard_end(shard) - s.plan.shard_begin(shard);
  s.progress.total_audio_ms += s.shard_audio_ms(shard);
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.intake.push_back(shard);
  }
  s.intake_changed.notify_all();
}

void ShardBuilder::close() {
  State& s = *state_;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.intake_closed = true;
  }
  s.intake_changed.notify_all();
}

int64_t ShardBuilder::shards_ahead() const {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mutex);
  int64_t ahead = static_cast<int64_t>(s.intake.size());
  for (auto task = s.shard_tasks.rbegin(); task != s.shard_tasks.rend() && task->begin >= s.next_task; ++task) ++ahead;
  return ahead;
}

double ShardBuilder::seconds_ahead() const {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.written == 0) return std::numeric_limits<double>::infinity();
  int64_t rows = static_cast<int64_t>(s.rows.size()) - s.written;
  for (int64_t shard : s.intake) rows += s.plan.shard_end(shard) - s.plan.shard_begin(shard);
  const double rows_per_second = static_cast<double>(s.written) / seconds_since(s.started);
  return static_cast<double>(rows) / rows_per_second;
}

bool ShardBuilder::done() const { return state_->finished.load(); }

BuildResult ShardBuilder::finish() {
  State& s = *state_;
  s.join();
  s.result.wall_seconds = std::chrono::duration<double>(Clock::now() - s.started).count();
  s.result.stages.decode = static_cast<double>(s.decode_ns.load()) * 1e-9;
  s.result.stages.text = static_cast<double>(s.text_ns.load()) * 1e-9;
  s.result.stages.features = static_cast<double>(s.features_ns.load()) * 1e-9;
  s.result.stages.write = static_cast<double>(s.write_ns.load()) * 1e-9;
  s.result.error = s.error;
  return std::move(s.result);
}

const BuildProgress& ShardBuilder::progress() const { return state_->progress; }

}  // namespace sluice::runtime
