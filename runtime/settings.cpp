#include "runtime/settings.h"

#include <sstream>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace sluice::runtime {
namespace {

using config::Setting;
using config::ValueType;

config::Schema build_schema() {
  config::Schema schema;
  // corpus: what to read.
  schema.add({"corpus.path", ValueType::string, "data/sample-corpus",
              "corpus folder as downloaded (LJSpeech, LibriTTS, VCTK, Common Voice locale folder), "
              "a Common Voice .tsv or a .jsonl manifest"});
  schema.add({"corpus.format", ValueType::string, "auto",
              "corpus layout (docs/cache-format.md); auto recognises each by its files: metadata.csv "
              "(ljspeech), a .jsonl file, SPEAKER/CHAPTER/*.normalized.txt (libritts), "
              "wav48_silence_trimmed/ + txt/ (vctk), validated.tsv + clips/ or a .tsv file (commonvoice)",
              {"auto", "ljspeech", "jsonl", "libritts", "vctk", "commonvoice"}});
  schema.add({"corpus.text_column", ValueType::string, "normalized",
              "LJSpeech column / LibriTTS file: normalized (3rd column, ID.normalized.txt; the raw "
              "text when empty) or raw (2nd column, ID.original.txt)",
              {"normalized", "raw"}});
  schema.add({"corpus.vctk_mic", ValueType::string, "mic1",
              "VCTK 0.92 microphone: pNNN_NNN_mic1.flac or _mic2.flac", {"mic1", "mic2"}});
  schema.add({"corpus.split", ValueType::string, "validated.tsv",
              "Common Voice TSV of the corpus folder to read (validated.tsv, train.tsv, dev.tsv, ...)"});
  schema.add({"corpus.speaker", ValueType::string, "default",
              "speaker name of samples whose corpus row names none"});
  schema.add({"corpus.language", ValueType::string, "",
              "language of samples whose corpus declares none (en, fa, ar, ...); empty = detect from "
              "the script, with Arabic-script rows that could be either read as Persian in a Persian corpus"});

  // text: normalisation and tokenizer.
  schema.add({"text.tokenizer", ValueType::string, "chars",
              "token ids from characters (versioned built-in vocabulary) or espeak-ng IPA phonemes",
              {"chars", "phonemes"}});
  schema.add({"text.lowercase", ValueType::boolean, "true", "lowercase Latin text"});
  schema.add({"text.expand_numbers", ValueType::boolean, "true",
              "spell out numbers (English and Persian words)"});
  schema.add({"text.expand_abbreviations", ValueType::boolean, "true",
              "expand English abbreviations such as Mr. and Dr."});

  // features: the log-mel spectrogram, equal to torchaudio's MelSpectrogram + log(clamp(x, floor)).
  schema.add({"features.sample_rate", ValueType::integer, "22050",
              "audio is resampled to this rate (Hz) before features", {}, 1000, 384000});
  schema.add({"features.n_fft", ValueType::integer, "1024", "FFT size", {}, 16, 65536});
  schema.add({"features.win_length", ValueType::integer, "1024",
              "Hann window length, at most n_fft", {}, 16, 65536});
  schema.add({"features.hop_length", ValueType::integer, "256", "samples between frames", {}, 1, 65536});
  schema.add({"features.f_min", ValueType::number, "0", "lowest mel filter frequency (Hz)", {}, 0, 1e6});
  schema.add({"features.f_max", ValueType::number, "8000",
              "highest mel filter frequency (Hz), at most sample_rate/2", {}, 1, 1e6});
  schema.add({"features.n_mels", ValueType::integer, "80", "mel bands", {}, 1, 1024});
  schema.add({"features.power", ValueType::number, "1",
              "exponent of the magnitude: 1 = magnitude (HiFi-GAN, Tacotron 2), 2 = power", {}, 0.1, 4});
  schema.add({"features.mel_scale", ValueType::string, "slaney", "mel scale", {"slaney", "htk"}});
  schema.add({"features.norm", ValueType::string, "slaney",
              "filter normalisation: slaney (area) or none", {"slaney", "none"}});
  schema.add({"features.center", ValueType::boolean, "true",
              "pad n_fft/2 on both sides so frame t is centred on sample t*hop"});
  schema.add({"features.pad_mode", ValueType::string, "reflect", "padding when centre is on",
              {"reflect", "constant"}});
  schema.add({"features.log_floor", ValueType::number, "1e-5",
              "values are clamped to this before the log", {}, 1e-12, 1});

  // cache: where and how the cache is written.
  schema.add({"cache.dir", ValueType::string, "out/cache", "cache directory (created if missing)"});
  schema.add({"cache.shard_size", ValueType::integer, "256",
              "corpus rows per shard; shards are the unit of work, resume and lazy opening", {}, 1, 1000000});
  schema.add({"cache.chunk_frames", ValueType::integer, "128",
              "mel frames per HDF5 chunk (each chunk carries a fletcher32 checksum)", {}, 1, 1 << 20});
  schema.add({"cache.gzip_level", ValueType::integer, "0",
              "gzip level of shard datasets; 0 = off (fastest reads)", {}, 0, 9});
  schema.add({"cache.mel_dtype", ValueType::string, "float32",
              "how shards store the mels: float32, or float16 (half the bytes, each value within 2^-11 of "
              "it relative, read as float32; docs/cache-format.md)",
              {"float32", "float16"}});

  // prep: the preparation job.
  schema.add({"prep.threads", ValueType::integer, "0",
              "decode/feature threads per rank; 0 = the cores of this node divided by its ranks", {}, 0, 1024});
  schema.add({"prep.min_seconds", ValueType::number, "0.5",
              "clips shorter than this are rejected (too_short)", {}, 0, 1e6});
  schema.add({"prep.max_seconds", ValueType::number, "20",
              "clips longer than this are rejected (too_long)", {}, 0, 1e6});
  schema.add({"prep.max_tokens", ValueType::integer, "1000",
              "samples with more text tokens than this are rejected (too_many_tokens): attention cost grows "
              "with its square, and no clip of prep.max_seconds says more", {}, 1, 1000000});
  schema.add({"prep.max_tokens_per_second", ValueType::number, "60",
              "samples with more text tokens per second of audio are rejected (too_many_tokens): speech "
              "runs at 10-25 characters or phonemes a second, so more means the text is not the clip's",
              {}, 0.1, 1e6});
  schema.add({"prep.max_reject_fraction", ValueType::number, "0.05",
              "more rejects than this fraction of the corpus fails the job (exit 3) and leaves no manifest",
              {}, 0, 1});
  schema.add({"prep.overwrite", ValueType::boolean, "false",
              "replace a finished cache made with other settings or inputs instead of refusing"});
  schema.add({"prep.progress_interval_s", ValueType::number, "2",
              "seconds between progress lines (and rank heartbeats)", {}, 0.05, 3600});

  // train: the run, the batch plan and the feed.
  schema.add({"train.run_dir", ValueType::string, "runs/train",
              "run directory: checkpoints, timings, report, effective config"});
  schema.add({"train.epochs", ValueType::integer, "1",
              "epochs to train (ignored when train.steps > 0); each trains every sample once, but for fewer than "
              "the model ranks deferred to the next epoch (after the last: past the run's end); with train.mixture, "
              "WEIGHT x each cache's samples",
              {}, 1, 1000000});
  schema.add({"train.steps", ValueType::integer, "0",
              "global steps to train; 0 = train.epochs full epochs", {}, 0, 1LL << 40});
  schema.add({"train.batch_size", ValueType::integer, "8",
              "samples per model rank per step (used when train.frame_budget is 0); an epoch's one tail step has "
              "fewer",
              {}, 0, 1 << 20});
  schema.add({"train.frame_budget", ValueType::integer, "0",
              "padded mel frames per batch; > 0 sets each bucket's batch size to budget / frames", {}, 0, 1LL << 40});
  schema.add({"train.bucket_edges", ValueType::string, "",
              "comma-separated upper mel-length edges of the buckets (frames); empty = quantiles"});
  schema.add({"train.n_buckets", ValueType::integer, "4",
              "quantile buckets when train.bucket_edges is empty", {}, 1, 1024});
  schema.add({"train.pad_multiple", ValueType::integer, "8",
              "padded lengths are rounded up to a multiple of this", {}, 1, 4096});
  schema.add({"train.seed", ValueType::integer, "1234", "seed of the shuffle, the model init and dropout"});
  schema.add({"train.mixture", ValueType::string, "",
              "several caches in one run: comma-separated DIR:WEIGHT (weight 1 when left out), replacing cache.dir; "
              "an epoch trains WEIGHT x a cache's samples of each (docs/architecture.md); empty = cache.dir alone"});
  schema.add({"train.mixture_temperature", ValueType::number, "1",
              "a of train.mixture: each cache's (with train.mixture_temperature_over, each language's or speaker's) "
              "share of an epoch is proportional to (WEIGHT x samples)^a; 1 = the weights as given, below 1 flattens "
              "toward small ones",
              {}, 0.01, 10});
  schema.add({"train.mixture_temperature_over", ValueType::string, "corpus",
              "what train.mixture_temperature shares an epoch over: corpus (each cache), language (each language over "
              "every cache: p ~ n^a, a small language upsampled; a cache's weight still counts within a language) or "
              "speaker (speakers belong to their cache); language and speaker also work with one cache",
              {"corpus", "language", "speaker"}});
  schema.add({"train.validation_fraction", ValueType::number, "0.05",
              "share of the cache held out for validation (by hashed sample id)", {}, 0, 0.9});
  schema.add({"train.validation_seed", ValueType::integer, "17",
              "seed of the validation split, separate so that train.seed does not move samples"});
  schema.add({"train.validation_every", ValueType::integer, "100",
              "global steps between validation passes; 0 = only at the end", {}, 0, 1LL << 40});
  schema.add({"train.checkpoint_every", ValueType::integer, "200",
              "global steps between checkpoints (one is always written at exit); 0 = only at exit",
              {}, 0, 1LL << 40});
  schema.add({"train.log_every", ValueType::integer, "10", "global steps between loss lines", {}, 1, 1LL << 40});
  schema.add({"train.credits", ValueType::integer, "3",
              "receive slots per model rank = batches in flight from its data rank (3 = triple buffering)",
              {}, 1, 64});
  schema.add({"train.read_ahead", ValueType::integer, "4",
              "batches a data rank collates ahead of sending, per model rank it feeds", {}, 1, 256});
  schema.add({"train.reader_threads", ValueType::integer, "2",
              "cache read + collate threads per data rank", {}, 1, 256});

  schema.add({"train.normalize_mels", ValueType::boolean, "false",
              "normalise every mel bin with the cache's statistics, (x - mean) / std, on the data ranks "
              "(their GPU where they have one); validation batches too"});
  schema.add({"train.time_masks", ValueType::integer, "0",
              "SpecAugment: time masks per training sample (0 = off); masks the mels the model also "
              "takes as targets, so meant for models that want masked inputs", {}, 0, 64});
  schema.add({"train.time_mask_frames", ValueType::integer, "20", "widest time mask in frames", {}, 0, 100000});
  schema.add({"train.freq_masks", ValueType::integer, "0",
              "SpecAugment: frequency masks per training sample (0 = off)", {}, 0, 64});
  schema.add({"train.freq_mask_bins", ValueType::integer, "8", "widest frequency mask in mel bins", {}, 0, 1024});

  schema.add({"train.replay_from_memory", ValueType::boolean, "false",
              "benchmark baseline: model ranks replay one in-memory batch per bucket in the plan's order "
              "instead of being fed (data ranks idle); bench/train/bench_feed.sh divides by it"});

  // model: what model ranks train.
  schema.add({"model.kind", ValueType::string, "transformer",
              "built-in Transformer TTS, or a TorchScript module whose forward returns the loss",
              {"transformer", "torchscript"}});
  schema.add({"model.size", ValueType::string, "tiny", "built-in model size", {"tiny", "small", "base"}});
  schema.add({"model.torchscript_path", ValueType::string, "", "TorchScript file for model.kind: torchscript"});
  schema.add({"model.device", ValueType::string, "cpu", "where model ranks train", {"cpu", "cuda"}});
  schema.add({"model.dropout", ValueType::number, "0.1", "dropout of the built-in model", {}, 0, 0.9});
  schema.add({"model.bf16", ValueType::boolean, "true", "bf16 autocast on GPU (ignored on CPU)"});

  // optim: the optimiser of model ranks.
  schema.add({"optim.lr", ValueType::number, "1e-3", "peak learning rate (AdamW)", {}, 0, 10});
  schema.add({"optim.warmup_steps", ValueType::integer, "100", "linear warm-up steps", {}, 0, 1LL << 40});
  schema.add({"optim.weight_decay", ValueType::number, "0.01", "AdamW weight decay", {}, 0, 10});
  schema.add({"optim.beta1", ValueType::number, "0.9", "AdamW beta1", {}, 0, 1});
  schema.add({"optim.beta2", ValueType::number, "0.98", "AdamW beta2", {}, 0, 1});
  schema.add({"optim.grad_clip", ValueType::number, "1.0", "gradient norm clip; 0 = off", {}, 0, 1e6});
  schema.add({"optim.accumulation", ValueType::integer, "1",
              "batches accumulated per optimiser step", {}, 1, 1024});

  // roles: who does what.
  schema.add({"roles.data_per_node", ValueType::integer, "-1",
              "data ranks per node; -1 = 1 on nodes with two or more ranks, 0 elsewhere", {}, -1, 1024});
  schema.add({"roles.layout", ValueType::string, "",
              "explicit comma-separated role per rank (data,model,...); overrides data_per_node"});
  schema.add({"roles.transport", ValueType::string, "auto",
              "how batches travel: auto = inproc (one process), mpi (CPU), cuda_ipc (data and model rank "
              "share a GPU), nccl (distinct GPUs)",
              {"auto", "inproc", "mpi", "nccl", "cuda_ipc"}});

  schema.add({"roles.model_gpu_memory_fraction", ValueType::number, "0",
              "cap on the share of its GPU's memory a model rank's torch allocator may take (0 = no cap); "
              "set it when a data rank shares the GPU", {}, 0, 1});
  schema.add({"roles.data_gpu_memory_fraction", ValueType::number, "0",
              "cap on the share of its GPU's memory a data rank may take for its upload buffer and GPU "
              "work (0 = no cap)", {}, 0, 1});

  // runtime: behaviour across ranks.
  schema.add({"runtime.timeout_s", ValueType::number, "120",
              "how long a rank may give no sign of life (no heartbeat) before the ranks waiting on it "
              "name it and the job exits non-zero; a slow but running rank is waited for", {}, 0.1, 1e6});
  schema.add({"runtime.timeouts", ValueType::string, "fixed",
              "how long a rank's own training may make no progress: fixed = only runtime.timeout_s's "
              "heartbeat (a stopped, dead or cut-off rank); measured = also a progress watchdog on each "
              "data rank and C++ model rank, whose deadline follows the run's measured step and checkpoint "
              "times (a rank stuck while its heartbeat beats, named in seconds)",
              {"fixed", "measured"}});
  schema.add({"runtime.timeout_factor", ValueType::number, "5",
              "measured timeouts: a step's deadline is this many times the p99 of the last 100 measured "
              "steps (a checkpoint's, of the measured checkpoints)", {}, 1.5, 1000});
  schema.add({"runtime.timeout_min_s", ValueType::number, "10",
              "measured timeouts: the shortest deadline a step or checkpoint gets, however fast they were",
              {}, 0.5, 1e6});
  schema.add({"runtime.startup_timeout_s", ValueType::number, "600",
              "measured timeouts: the deadline before the first step and the warm-up steps are done, and for "
              "the first checkpoint or validation (nothing measured yet)", {}, 1, 1e6});
  schema.add({"runtime.timeout_warmup_steps", ValueType::integer, "10",
              "measured timeouts: steps measured before their times set the deadline (until then: "
              "runtime.startup_timeout_s)", {}, 1, 1000000});
  schema.add({"runtime.timing", ValueType::boolean, "true",
              "record every stage on every rank into RUN_DIR/timeline/ for the report (sluice report); "
              "costs well under 1% of step time"});
  schema.add({"runtime.timing_capacity", ValueType::integer, "65536",
              "spans kept per thread; a longer run keeps its most recent ones", {}, 64, 1LL << 26});
  schema.add({"runtime.status_every_s", ValueType::number, "10",
              "seconds between rank 0's live status lines (step, samples/s, input wait, slowest rank); "
              "0 = off", {}, 0, 1e6});
  schema.add({"runtime.clock_pings", ValueType::integer, "32",
              "ping-pong exchanges per rank aligning its clock to rank 0's, at start and at end", {}, 1, 10000});

  // debug: known causes put in on purpose, to check the report against (docs/report.md).
  schema.add({"debug.delay_stage", ValueType::string, "",
              "sleep inside this stage (e.g. cache_read, collate, send, forward); empty = off"});
  schema.add({"debug.delay_ranks", ValueType::string, "",
              "comma-separated ranks that sleep; empty = every rank running the stage"});
  schema.add({"debug.delay_ms", ValueType::number, "0", "milliseconds of each delay", {}, 0, 1e7});
  schema.add({"debug.delay_every", ValueType::integer, "1",
              "delay every k-th batch (global steps k-1, 2k-1, ...) or corpus row; 1 = every one",
              {}, 1, 1LL << 40});
  schema.add({"debug.log_samples", ValueType::boolean, "false",
              "every model rank appends the sample indices of each batch it trains to "
              "RUN_DIR/samples/rank-N.tsv (global step, epoch, step, indices): what a run, or a resumed "
              "one, trained on"});
  return schema;
}

}  // namespace

const config::Schema& settings_schema() {
  static const config::Schema schema = build_schema();
  return schema;
}

dataset::MelConfig mel_config(const config::Config& config) {
  dataset::MelConfig mel;
  mel.sample_rate = static_cast<int>(config.integer("features.sample_rate"));
  mel.n_fft = static_cast<int>(config.integer("features.n_fft"));
  mel.win_length = static_cast<int>(config.integer("features.win_length"));
  mel.hop_length = static_cast<int>(config.integer("features.hop_length"));
  mel.f_min = config.number("features.f_min");
  mel.f_max = config.number("features.f_max");
  mel.n_mels = static_cast<int>(config.integer("features.n_mels"));
  mel.power = config.number("features.power");
  mel.mel_scale = config.string("features.mel_scale");
  mel.norm = config.string("features.norm");
  mel.center = config.boolean("features.center");
  mel.pad_mode = config.string("features.pad_mode");
  mel.log_floor = config.number("features.log_floor");
  mel.validate();
  return mel;
}

dataset::TextConfig text_config(const config::Config& config) {
  dataset::TextConfig text;
  text.lowercase = config.boolean("text.lowercase");
  text.expand_numbers = config.boolean("text.expand_numbers");
  text.expand_abbreviations = config.boolean("text.expand_abbreviations");
  return text;
}

dataset::CorpusOptions corpus_options(const config::Config& config) {
  dataset::CorpusOptions options;
  options.format = config.string("corpus.format");
  options.text_column = config.string("corpus.text_column");
  options.speaker = config.string("corpus.speaker");
  options.language = config.string("corpus.language");
  options.vctk_mic = config.string("corpus.vctk_mic");
  options.split = config.string("corpus.split");
  return options;
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> items;
  std::stringstream stream(text);
  for (std::string item; std::getline(stream, item, ',');) {
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (!item.empty()) items.push_back(item);
  }
  return items;
}

nlohmann::json output_settings(const config::Config& config) {
  const nlohmann::json all = config.to_json();
  nlohmann::json settings;
  settings["features"] = all["features"];
  settings["text"] = all["text"];
  settings["corpus"] = all["corpus"];
  settings["corpus"].erase("path");
  settings["cache"] = all["cache"];
  settings["cache"].erase("dir");
  // float32 is what every cache held before the key existed: left out, their fingerprints stay.
  if (settings["cache"].value("mel_dtype", std::string("float32")) == "float32") settings["cache"].erase("mel_dtype");
  settings["prep"]["min_seconds"] = all["prep"]["min_seconds"];
  settings["prep"]["max_seconds"] = all["prep"]["max_seconds"];
  settings["prep"]["max_tokens"] = all["prep"]["max_tokens"];
  settings["prep"]["max_tokens_per_second"] = all["prep"]["max_tokens_per_second"];
  return settings;
}

}  // namespace sluice::runtime
