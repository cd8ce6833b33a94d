#include "commands/prep_command.h"

#include "common/mpi_session.h"
#include "runtime/prep/prep_job.h"

namespace sluice {

void PrepCommand::add(CLI::App& app) {
  command_ = app.add_subcommand(
      "prep",
      "Prepare the feature cache: corpus -> sharded HDF5 (mels, token ids). Run under `mpirun -np N` "
      "or `srun` to split the work across ranks by audio duration; reruns keep finished shards.");
  config_.attach(*command_);
  command_->footer(
      "Writes CACHE/shard-NNNNN.h5, index.h5, manifest.json (last), rejects.jsonl, prep-report.json, "
      "the effective config sluice-prep.yaml, timeline/rank-N.json and the prep report (report.md, report.json, "
      "report.html, trace.json).\nExit codes: 0 done; 1 failed (finished shards are "
      "kept: rerun to resume); 2 bad option or config, or the cache was made from other inputs "
      "(--overwrite replaces it); 3 more rejects than prep.max_reject_fraction (see rejects.jsonl); "
      "5 the disk is full or read-only (the file is named; fix it and rerun to resume).\n"
      "Corpus formats (corpus.format; auto recognises each by its files; audio: wav, flac, ogg, opus, mp3):\n"
      "  ljspeech     DIR/metadata.csv `LJ001-0001|text|normalized text` + DIR/wavs/LJ001-0001.flac\n"
      "  jsonl        FILE.jsonl `{\"id\":\"x1\",\"audio\":\"wavs/x1.wav\",\"text\":\"hi\",\"speaker\":\"s1\",\"language\":\"en\"}`\n"
      "  libritts     DIR/train-clean-100/103/1240/103_1240_000000_000000.wav + .normalized.txt (or 103_1240.trans.tsv)\n"
      "  vctk         DIR/wav48_silence_trimmed/p225/p225_001_mic1.flac + DIR/txt/p225/p225_001.txt (corpus.vctk_mic)\n"
      "  commonvoice  cv-corpus-*/fa/validated.tsv (corpus.split) + clips/common_voice_fa_19255379.mp3\n"
      "See docs/cache-format.md.");
  command_->add_option("--corpus", corpus_,
                       "corpus to read (sets corpus.path): a corpus folder as downloaded (LJSpeech, LibriTTS, "
                       "VCTK, Common Voice locale folder), a Common Voice .tsv or a .jsonl manifest");
  command_->add_option("-o,--out", out_, "cache directory to write (sets cache.dir)");
  command_->add_option("--threads", threads_, "decode/feature threads per rank (sets prep.threads; 0 = auto)")
      ->check(non_negative());
  command_->add_flag("--overwrite", overwrite_,
                     "replace an existing cache made from other settings or inputs (sets prep.overwrite)");
}

void PrepCommand::start() {
  try {
    settings_ = config_.load();
    if (!corpus_.empty()) settings_->set("corpus.path", corpus_, "--corpus");
    if (!out_.empty()) settings_->set("cache.dir", out_, "--out");
    if (threads_ >= 0) settings_->set("prep.threads", std::to_string(threads_), "--threads");
    if (overwrite_) settings_->set("prep.overwrite", "true", "--overwrite");
    listing_ = runtime::start_listing(*settings_);
  } catch (...) {
    start_error_ = std::current_exception();
  }
}

double PrepCommand::join_timeout_s() const {
  return settings_ ? settings_->number("runtime.timeout_s") : config_.timeout_s();
}

int PrepCommand::run(const MpiSession& session) {
  if (start_error_) std::rethrow_exception(start_error_);
  return runtime::run_prep(session, *settings_, std::move(listing_));
}

}  // namespace sluice
