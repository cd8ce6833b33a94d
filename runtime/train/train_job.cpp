#include "runtime/train/train_job.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <thread>

#include <sys/resource.h>

#include <nlohmann/json.hpp>

#include "cache/cache_reader.h"
#include "common/error.h"
#include "common/file_lock.h"
#include "common/file_util.h"
#include "common/host.h"
#include "common/log.h"
#include "common/slurm_env.h"
#include "common/stop_signal.h"
#include "runtime/rank_timing.h"
#include "runtime/train/batch_feeder.h"
#include "runtime/train/cache_agreement.h"
#include "runtime/train/checkpoints.h"
#include "runtime/train/data_side.h"
#include "runtime/train/finish_line.h"
#include "runtime/train/mpi_gradient_reducer.h"
#include "runtime/train/padding_summary.h"
#include "runtime/train/progress_watchdog.h"
#include "runtime/train/role_plan.h"
#include "runtime/train/status_board.h"
#include "runtime/train/train_run.h"
#include "runtime/train/train_settings.h"
#include "runtime/transport/device_memory.h"
#include "runtime/transport/feed_factory.h"
#include "runtime/transport/gpu_facts.h"
#include "timing/span_recorder.h"

namespace sluice::runtime {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::shared_ptr<spdlog::logger> logger() { return log::get("runtime"); }

constexpr int timeline_tag = 7320;
constexpr int run_dir_lock_tag = 7321;

int64_t peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

// Whom a rank tells that it is still working (runtime/train/finish_line.h): a model rank its data rank
// and rank 0; the first model rank, which writes the checkpoints, also the other model ranks.
std::vector<int> finish_line_watchers(const MpiSession& session, const RunSetup& setup, const RankPlacement& me) {
  std::vector<int> watchers;
  if (me.role != Role::model) return watchers;
  const auto add = [&](int rank) {
    if (rank >= 0 && rank != session.rank() && std::find(watchers.begin(), watchers.end(), rank) == watchers.end()) {
      watchers.push_back(rank);
    }
  };
  add(me.fed_by);
  add(0);
  if (!setup.model_ranks.empty() && setup.model_ranks.front() == session.rank()) {
    for (int r : setup.model_ranks) add(r);
  }
  return watchers;
}

json channel_json(const std::string& name, int peer, const char* direction, const transport::ChannelStats& stats) {
  return {{"name", name},
          {"peer", peer},
          {"direction", direction},
          {"batches", stats.batches},
          {"bytes", stats.bytes},
          {"wait_seconds", stats.wait_s},
          {"transfer_seconds", stats.transfer_s}};
}

// Who this rank is in the run, and the settings the report compares periods and limits with (as
// the config holds them).
timing::RankTimeline timeline_identity(const MpiSession& session, const config::Config& config,
                                       const RankPlacement& me, const std::string& transport) {
  timing::RankTimeline timeline;
  timeline.job = "train";
  timeline.rank = session.rank();
  timeline.world_size = session.size();
  timeline.host = session.host();
  timeline.gpu = me.gpu;
  timeline.role = role_name(me);
  timeline.feeds = me.feeds;
  timeline.fed_by = me.fed_by;
  const json all = config.to_json();
  for (const std::string key : {"train.checkpoint_every", "train.validation_every", "train.log_every",
                                "train.credits", "train.batch_size", "train.frame_budget", "train.reader_threads",
                                "train.read_ahead", "cache.shard_size", "roles.data_per_node",
                                "runtime.timeout_s", "runtime.timeouts", "model.size", "model.device"}) {
    const size_t dot = key.find('.');
    timeline.settings[key] = all[key.substr(0, dot)][key.substr(dot + 1)];
  }
  timeline.settings["roles.transport"] = transport;  // resolved: inproc | mpi | cuda_ipc | nccl
  return timeline;
}

// The GPUs a model rank can use, as every rank must count them for the same role plan: libtorch's
// count in sluice-train; in a process without libtorch (a Python model rank's) the CUDA runtime's,
// the same devices (torch_parts.h).
int visible_gpus(const TorchParts* torch) {
  if (torch != nullptr) return torch->cuda_device_count();
  const transport::GpuEnvironment gpus = transport::gpu_environment();
  if (!gpus.cuda_compiled) {
    throw ConfigError("model.device is cuda, but this sluice Python module was built without CUDA (" + gpus.problem +
                      "), so it cannot see the GPUs that the sluice ranks place the model ranks on: rebuild it "
                      "where the CUDA toolkit is found (SLUICE_CUDA=ON)");
  }
  return static_cast<int>(gpus.gpus.size());
}

// The role plan from the ranks' hosts and the node's GPUs; rank 0 prints it and keeps the config
// in the run directory.
RolePlan plan_and_print_roles(const MpiSession& session, const TrainSettings& settings, const JobAgreement& job,
                              const TorchParts* torch) {
  std::vector<std::string> hosts;
  for (int r = 0; r < session.size(); ++r) hosts.push_back(session.host_of(r));
  RolePlanRequest request =
      settings.role_plan_request(std::move(hosts), settings.model_on_gpu() ? visible_gpus(torch) : 0);
  request.python_ranks = job.python_ranks();
  // Under Slurm, its view of tasks, nodes and GPUs must match the hosts the plan is built from.
  check_slurm_topology(session, settings.timeout_s, request.model_needs_gpu ? request.gpus_per_node : -1);
  RolePlan roles = plan_roles(request);
  if (session.rank() == 0) {
    std::printf("%s", roles.table().c_str());
    std::fflush(stdout);
    log::get("runtime")->info("allocator: {}", allocator_in_use());
  }
  return roles;
}

// Python model ranks resume where their script says (it checkpoints its own model); the data
// ranks start the feed there. The same check on every rank.
int64_t python_resume_step(const JobAgreement& job, int64_t end_step) {
  if (job.resume_step >= end_step) {
    throw ConfigError("sluice.Feed(resume_step=" + std::to_string(job.resume_step) + ") is at or past the run's end (" +
                      std::to_string(end_step) + " global steps): raise train.steps or train.epochs");
  }
  return job.resume_step;
}

// The names of train.mixture_temperature_over's units (none for corpus).
const std::vector<std::string>& unit_names(const cache::CacheReader& reader, const BatchPlanConfig& plan) {
  static const std::vector<std::string> none;
  return plan.mixture_unit == MixtureUnit::language ? reader.languages()
         : plan.mixture_unit == MixtureUnit::speaker ? reader.speakers()
                                                     : none;
}

// What train.mixture_temperature_over gives each language or speaker of an epoch: the eight most
// sampled by name, then one line for the rest (a corpus may have tens of thousands of speakers).
void print_unit_shares(const cache::CacheReader& reader, const std::vector<PlanSample>& samples,
                       const BatchPlanConfig& plan) {
  const nlohmann::json shares = mixture_units_json(samples, plan, unit_names(reader, plan), 8);
  std::printf("train.mixture_temperature %g over each %s, samples per epoch (of the split's):", plan.mixture_temperature,
              mixture_unit_name(plan.mixture_unit));
  const char* separator = "";
  for (const auto& unit : shares["units"]) {
    std::printf("%s %s %.0f (%lld)", separator, unit["name"].get<std::string>().c_str(), unit["per_epoch"].get<double>(),
                static_cast<long long>(unit["samples"].get<int64_t>()));
    separator = ";";
  }
  if (shares.contains("others")) {
    const auto& others = shares["others"];
    std::printf("; %lld more %ss %.0f (%lld)", static_cast<long long>(others["units"].get<int64_t>()),
                mixture_unit_name(plan.mixture_unit), others["per_epoch"].get<double>(),
                static_cast<long long>(others["samples"].get<int64_t>()));
  }
  std::printf("\n");
}

// Step 1 of the run protocol (train_job.h): the role plan, the train/validation split, the
// batch plan and, with --resume, where to start. The same on every rank, no messages.
RunSetup plan_run(const MpiSession& session, const config::Config& config, const TrainSettings& settings,
                  const cache::CacheReader& reader, const TrainOptions& options, const JobAgreement& job) {
  RunSetup setup;
  setup.roles = plan_and_print_roles(session, settings, job, options.torch);
  setup.model_ranks = setup.roles.model_ranks();
  SplitSamples split = split_samples(reader.entries(), settings.validation_fraction, settings.validation_seed);
  setup.validation = std::move(split.validation);
  setup.schedule = std::make_unique<PlanSchedule>(std::move(split.train), settings.plan,
                                                  static_cast<int>(setup.model_ranks.size()));
  if (options.resume) {
    // Anchors the plan's numbering at the checkpoint (the rest of the epoch after an elastic resume).
    setup.resume_from = resume_position(settings.run_dir, *setup.schedule, session.rank() == 0);
    setup.first_step = (*setup.resume_from)["global_step"].get<int64_t>();
  }
  // train.epochs ends at an epoch's start, which an elastic resume moves.
  setup.end_step = settings.steps > 0 ? settings.steps : setup.schedule->epoch_start(settings.epochs);
  if (session.rank() == 0) {
    std::printf("%s", setup.schedule->shapes().summary().c_str());
    if (!settings.mixture.empty()) {
      // What each cache gives an epoch (docs/architecture.md, "Many corpora, one run").
      const std::vector<int64_t>& owed = setup.schedule->shapes().owed_per_corpus();
      std::printf("mixture (train.mixture_temperature %g), epoch 0:", settings.plan.mixture_temperature);
      for (size_t c = 0; c < owed.size(); ++c) {
        std::printf("%s %s weight %g: %lld samples", c == 0 ? "" : ";", settings.mixture[c].dir.c_str(),
                    settings.mixture[c].weight, static_cast<long long>(owed[c]));
      }
      std::printf("\n");
    }
    if (settings.plan.mixture_unit != MixtureUnit::corpus) print_unit_shares(reader, setup.schedule->samples(), settings.plan);
    std::printf("training %lld global steps (%lld per epoch), %zu validation samples\n",
                static_cast<long long>(setup.end_step), static_cast<long long>(setup.schedule->steps_per_epoch()),
                setup.validation.size());
    const int64_t deferred_past_end = settings.steps == 0 ? setup.schedule->deferred_after(settings.epochs) : -1;
    if (deferred_past_end >= 0) {
      // The last epoch's remainder cannot be trained without a repeat or an unequal batch.
      std::printf("%lld samples deferred past the run's end (the last epoch's remainder, fewer than the model ranks; "
                  "trained first if the run is extended with more train.epochs)\n",
                  static_cast<long long>(deferred_past_end));
    }
    std::fflush(stdout);
    // Only now that a --resume is known to go on: a refused one leaves the earlier run's files as they were.
    config.write(settings.run_dir / "sluice-train.yaml");
    // RUN_DIR/padding.json: what padding costs the model ranks, for the report's padding verdict.
    std::vector<std::string> corpus_dirs;
    for (const MixtureEntry& entry : settings.mixture) corpus_dirs.push_back(entry.dir);
    write_padding_summary(settings.run_dir, setup.schedule->samples(), settings.plan,
                          static_cast<int>(setup.model_ranks.size()), deferred_past_end, corpus_dirs,
                          unit_names(reader, settings.plan));
  }
  if (session.rank() == 0 && setup.resume_from && (*setup.resume_from)["elastic"].get<bool>()) {
    const auto rest = setup.schedule->epoch(setup.schedule->position(setup.first_step).epoch);
    std::printf("elastic resume: the checkpoint's plan had %d model rank(s), this run has %zu; epoch %lld goes on "
                "with the %lld samples it has not trained (%lld were; %zu carried in), in %lld steps (%lld deferred to "
                "the next epoch)\n",
                (*setup.resume_from)["model_ranks"].get<int>(), setup.model_ranks.size(),
                static_cast<long long>(rest->epoch()),
                static_cast<long long>(rest->owed_samples() + static_cast<int64_t>(rest->carried().size()) -
                                       static_cast<int64_t>(rest->trained_earlier().size())),
                static_cast<long long>(rest->trained_earlier().size()), rest->carried().size(),
                static_cast<long long>(rest->steps()), static_cast<long long>(rest->deferred_samples()));
    std::fflush(stdout);
  }
  if (job.resume_step >= 0) setup.first_step = python_resume_step(job, setup.end_step);
  if (!job.python_ranks().empty() && settings.replay_from_memory) {
    throw ConfigError("train.replay_from_memory replays batches inside sluice's C++ model loop; a Python rank "
                      "replays in its script: set train.replay_from_memory: false");
  }
  return setup;
}

// A GPU rank works on its own GPU from here on; torch gets this rank's share of the cores (here
// libtorch's; a Python model rank's script is told it, feed.compute_threads). Returns the share.
int set_up_compute(const MpiSession& session, const TrainSettings& settings, const RankPlacement& me,
                   const TorchParts* torch) {
  if (me.gpu >= 0 && settings.model_on_gpu()) transport::set_current_device(me.gpu);
  const int cores = usable_cores();
  const bool unbound = cores >= static_cast<int>(std::thread::hardware_concurrency());
  const int compute_threads = std::max(1, unbound ? cores / session.local_size() : cores);
  if (torch != nullptr) torch->set_compute_threads(compute_threads);
  const int busy = me.role == Role::model ? compute_threads : settings.reader_threads + 1;
  if (const std::string warning = binding_warning(busy); !warning.empty() && session.local_rank() <= 1) {
    logger()->warn("{}", warning);  // once for a data rank and once for a model rank on a node
  }
  return compute_threads;
}

// One rank's run between the set-up and the end: what the role runners below share.
struct RankRun {
  const MpiSession& session;
  const TrainSettings& settings;
  const RunSetup& setup;
  cache::CacheReader& reader;
  const RankPlacement& me;
  transport::ChannelOptions channel;  // every feed channel's options but its name
  FeedOptions feed;                   // the data side's feeder options
  RankContext& context;
  timing::RankTimeline& timeline;
  StatusBoard& status;
  const ModelSide& model_side;  // the C++ model loop (libtorch's) or the process's own (a Python rank's)
};

// This rank's model side: the process's own (a Python model rank's, model_side.h), else the C++
// model loop of the libtorch parts; a process with neither links no model to train.
ModelSide model_side_of(const TrainOptions& options) {
  if (options.model_side) return options.model_side;
  if (options.torch != nullptr) return options.torch->model_loop;
  return [](const ModelRankParts& parts) -> json {
    throw Error(ErrorKind::internal, "rank " + std::to_string(parts.session.rank()) + " is a model rank, but this "
                "process has neither sluice's C++ model loop (libtorch, sluice-train) nor a model side of its own");
  };
}

json run_model_side(RankRun& run, const ModelFeed& feed, model::GradientReducer* reducer, MPI_Comm model_comm) {
  const ModelRankParts parts{run.session, run.settings, run.setup, run.reader, feed, model_comm, reducer, run.context};
  return run.model_side(parts);
}

// One process: the data side feeds the trainer from a thread through an in-process channel.
void run_one_process(RankRun& run, json& rank_stats) {
  transport::ChannelOptions options = run.channel;
  options.name = "feed (in-process)";
  auto pair = transport::make_channel_pair(run.setup.roles.transport, run.me.gpu, options);
  BatchFeeder feeder(run.reader, *run.setup.schedule, run.feed);  // no after_send: MPI stays on this thread
  std::exception_ptr feed_error;
  FeedStats feed_stats;
  std::thread data_thread([&] {
    timing::SpanRecorder::global().name_this_thread("feeder");
    try {
      feed_stats = feeder.run(run.setup.first_step, run.setup.end_step, {{0, pair.sender.get(), run.session.rank()}});
    } catch (...) {
      feed_error = std::current_exception();
      pair.sender.reset();  // tells the trainer "aborted" at once instead of at its deadline
    }
  });
  const ModelFeed feed{pair.receiver.get(), run.session.rank(), false};
  try {
    rank_stats = run_model_side(run, feed, nullptr, MPI_COMM_NULL);
  } catch (const TransportError&) {
    pair.receiver->close();  // unblocks the data thread
    data_thread.join();
    // "The sender aborted" is only the trainer's view of the data thread's failure: the feed's
    // own error (the damaged shard, what to run) is the one to report, as a data rank would.
    if (feed_error) std::rethrow_exception(feed_error);
    throw;
  } catch (...) {
    pair.receiver->close();
    data_thread.join();
    throw;
  }
  data_thread.join();
  // After a stop signal the trainer shut the channel: the feed's error is the expected end.
  if (feed_error && !stop_requested() && !run.context.stopped) std::rethrow_exception(feed_error);
  rank_stats["feed"] = feed_stats_json(feed_stats, run.session.rank());
  run.timeline.channels.push_back(channel_json(options.name, run.session.rank(), "receive", pair.receiver->stats()));
}

// A data rank: one channel to each model rank it feeds, the feeder on this (the MPI) thread.
void run_data_rank(RankRun& run, json& rank_stats) {
  const int rank = run.session.rank();
  std::vector<std::unique_ptr<transport::SendChannel>> channels;
  std::vector<FeedTarget> targets;
  for (int model_rank : run.me.feeds) {
    transport::ChannelOptions options = run.channel;
    options.name = "feed rank " + std::to_string(rank) + " -> rank " + std::to_string(model_rank);
    channels.push_back(transport::make_send_channel(run.setup.roles.transport, run.session, model_rank, run.me.gpu,
                                                    options));
    targets.push_back({run.setup.model_index_of(model_rank), channels.back().get(), model_rank});
  }
  const auto add_channel_stats = [&] {
    for (size_t i = 0; i < channels.size(); ++i) {
      run.timeline.channels.push_back(channel_json("feed rank " + std::to_string(rank) + " -> rank " +
                                                       std::to_string(targets[i].rank),
                                                   targets[i].rank, "send", channels[i]->stats()));
    }
  };
  FeedOptions feed = run.feed;
  feed.after_send = [&](int64_t global) {
    if (run.context.watchdog != nullptr) run.context.watchdog->stepped(global);
    if (!run.status.due()) return;
    RankStatus mine;
    mine.role = "data";
    mine.step = global + 1;
    mine.end_step = run.setup.end_step;
    run.status.post(mine);
  };
  BatchFeeder feeder(run.reader, *run.setup.schedule, std::move(feed));
  try {
    const double copy_baseline = host_copy_bandwidth(run.channel.slot_bytes);
    rank_stats = feed_stats_json(feeder.run(run.setup.first_step, run.setup.end_step, targets), rank);
    rank_stats["transfer_baseline_bytes_per_s"] = copy_baseline;
  } catch (const TransportError&) {
    run.context.waiting_for = feeder.last_target_rank();
    add_channel_stats();
    // The model ranks checkpointed and shut their channels: the expected end of a stop, whether
    // the signal reached this rank or only a model rank (they agree on the stop among themselves).
    const auto closed = std::find_if(targets.begin(), targets.end(), [&](const FeedTarget& t) {
      return t.rank == feeder.last_target_rank() && t.channel->receiver_closed();
    });
    if (!stop_requested() && closed == targets.end()) throw;
    run.context.stopped = true;
    run.context.waiting_for = -1;
    rank_stats = json{{"rank", rank},
                      {"role", "data"},
                      {"stopped", stop_requested() ? std::string(stop_signal_name())
                                                   : "rank " + std::to_string(closed->rank) + " closed its feed"}};
  }
  if (run.timeline.channels.empty()) add_channel_stats();
}

// A model rank: the channel from its data rank (none when replaying) and the gradient reduction
// over the model ranks' communicator.
void run_model_rank(RankRun& run, const MpiCommunicator& model_comm, json& rank_stats) {
  // A collective cannot tell which member is late; the others are named with their hosts,
  // which with two model ranks (or one lost node) is the culprit itself.
  std::string others;
  for (int r : run.setup.model_ranks) {
    if (r != run.session.rank()) others += (others.empty() ? "" : ", ") + run.session.describe(r);
  }
  MpiGradientReducer reducer(model_comm.get(), run.settings.timeout_s, others);
  const bool peers = run.setup.model_ranks.size() > 1;
  if (peers) run.context.measure_allreduce = [&reducer](size_t floats) { return reducer.measure_bandwidth(floats, 3); };
  transport::ChannelOptions options = run.channel;
  options.name = "feed rank " + std::to_string(run.me.fed_by) + " -> rank " + std::to_string(run.session.rank());
  const std::string& backend = run.setup.roles.transport;
  std::unique_ptr<transport::ReceiveChannel> receiver;
  if (!run.settings.replay_from_memory) {
    receiver = transport::make_receive_channel(backend, run.session, run.me.fed_by, run.me.gpu, options);
  }
  const auto add_channel_stats = [&] {
    if (!receiver) return;
    run.timeline.channels.push_back(channel_json(options.name, run.me.fed_by, "receive", receiver->stats()));
  };
  const ModelFeed feed{receiver.get(), run.me.fed_by, transport::moves_device_memory(backend)};
  try {
    rank_stats = run_model_side(run, feed, peers ? &reducer : nullptr, model_comm.get());
  } catch (...) {
    add_channel_stats();
    throw;
  }
  add_channel_stats();
  rank_stats["allreduce_exposed_seconds"] = reducer.exposed_seconds();
  run.context.measure_allreduce = nullptr;  // it pointed at the reducer
}

// Steps 2 and 3 of the run protocol, by this rank's role.
void run_role(RankRun& run, json& rank_stats) {
  const bool replay = run.settings.replay_from_memory;
  if (run.me.role == Role::data_and_model) {
    if (replay) {
      rank_stats = run_model_side(run, ModelFeed{nullptr, 0, false}, nullptr, MPI_COMM_NULL);
    } else {
      run_one_process(run, rank_stats);
    }
    return;
  }
  // The model ranks' communicator for gradient reduction (collective over the world, once).
  const MpiCommunicator model_comm = MpiCommunicator::split(run.session.world(), run.me.role == Role::model,
                                                            run.session.rank(), "the model ranks");
  if (run.me.role == Role::data && replay) {
    rank_stats = json{{"rank", run.session.rank()}, {"role", "data"}, {"batches", 0}, {"replay_from_memory", true}};
  } else if (run.me.role == Role::data) {
    run_data_rank(run, rank_stats);
  } else {
    run_model_rank(run, model_comm, rank_stats);
  }
}

// The data side's work for this rank: none on a model rank or when replaying from memory.
std::unique_ptr<DataSide> make_data_side(const MpiSession& session, const TrainSettings& settings,
                                         const RunSetup& setup, const RankPlacement& me,
                                         const model::FeatureTransformSettings& features, size_t slot_bytes,
                                         const TorchParts* torch) {
  if (me.role == Role::model || settings.replay_from_memory) return nullptr;
  auto data_side =
      std::make_unique<DataSide>(session, settings, me, setup.roles.transport, features, slot_bytes, torch);
  if (session.rank() == setup.roles.data_ranks().front() && data_side->transform() != nullptr) {
    logger()->info("data ranks: {}", data_side->transform()->describe());
  }
  return data_side;
}

// Rank 0 holds RUN_DIR/train.lock to the end of the run (common/file_lock.h): a second train into
// the same run directory, --resume or not, would overwrite this one's checkpoints and timelines.
// Every rank learns of a refusal, or that rank 0 could not make the directory at all (a path
// below a file, a read-only file system), so that all stop with the same error and exit code
// before anything is written: the other ranks once waited out runtime.timeout_s for rank 0.
void lock_run_dir(const MpiSession& session, const TrainSettings& settings, std::optional<FileLock>& lock) {
  ErrorKind kind = ErrorKind::config;
  std::string refusal;
  if (session.rank() == 0) {
    try {
      std::error_code error;
      fs::create_directories(settings.run_dir, error);
      if (error) throw_file_error(error.value(), "create the run directory", settings.run_dir.string(), ErrorKind::config);
      const fs::path path = settings.run_dir / "train.lock";
      lock.emplace(path, ErrorKind::config);
      if (!lock->held()) {
        refusal = "another train is running in " + settings.run_dir.string() + " (" + lock->holder() + "; " +
                  path.string() + " is locked): two runs in one directory would overwrite each other's checkpoints. "
                  "Wait for it to finish (or stop it), or choose another --run-dir; a train that died releases the "
                  "lock by itself";
      }
    } catch (const Error& error) {
      kind = error.kind();
      refusal = error.what();
    }
  }
  // The kind travels as the message's first byte.
  refusal = broadcast_string(session, refusal.empty() ? "" : static_cast<char>('0' + static_cast<int>(kind)) + refusal,
                             run_dir_lock_tag, settings.timeout_s, "whether the run directory is free");
  if (refusal.empty()) return;
  Error error(static_cast<ErrorKind>(refusal[0] - '0'), refusal.substr(1));
  error.mark_on_every_rank();
  throw error;
}

// cache.dir, or with train.mixture its caches as one (they must hold the same features).
cache::CacheReader open_training_cache(const config::Config& config) {
  const std::vector<MixtureEntry> mixture = parse_mixture(config.string("train.mixture"));
  if (mixture.empty()) return cache::CacheReader::open(config.string("cache.dir"));
  std::vector<fs::path> dirs;
  for (const MixtureEntry& entry : mixture) dirs.emplace_back(entry.dir);
  return cache::CacheReader::open_mixture(dirs);
}

// The plan's mixture learns where each cache's indices begin.
TrainSettings with_mixture_indices(TrainSettings settings, const cache::CacheReader& reader) {
  for (size_t c = 0; c < settings.plan.mixture.size(); ++c) settings.plan.mixture[c].first_index = reader.first_index(c);
  return settings;
}

// The run directory is this run's: locked, and either a run to --resume on the same cache or
// train.mixture (RUN_DIR/cache.json) or free of an earlier run's checkpoints (--overwrite deletes them). All
// checked before rank 0 writes anything into it, so that a refused run leaves an earlier one intact.
void claim_run_dir(const MpiSession& session, const TrainSettings& settings, const cache::CacheReader& reader,
                   const TrainOptions& options, std::optional<FileLock>& lock) {
  if (options.resume && options.overwrite) {
    throw ConfigError("--resume continues the run in " + settings.run_dir.string() +
                      " and --overwrite deletes it: give one of them");
  }
  lock_run_dir(session, settings, lock);
  nlohmann::json record = cache_record(reader.manifest(), reader.dir());
  if (record.contains("mixture")) {
    for (size_t c = 0; c < settings.mixture.size(); ++c) record["mixture"][c]["weight"] = settings.mixture[c].weight;
    record["mixture_temperature"] = settings.plan.mixture_temperature;
    if (settings.plan.mixture_unit != MixtureUnit::corpus) {
      record["mixture_temperature_over"] = mixture_unit_name(settings.plan.mixture_unit);
    }
  }
  if (options.resume) {
    check_resumed_cache(settings.run_dir, record);
  } else {
    claim_fresh_run_dir(settings.run_dir, options.overwrite, session.rank() == 0);
  }
  if (session.rank() == 0) write_cache_record(settings.run_dir, record);
}

// runtime.timeouts: measured: a progress watchdog on a rank whose own progress sluice reports: a
// data rank that feeds, a model rank running the C++ model loop (a Python model rank's script
// reports none). Made on the training thread, once the heartbeat runs.
std::unique_ptr<ProgressWatchdog> make_progress_watchdog(const MpiSession& session, const TrainSettings& settings,
                                                         const RankPlacement& me, const TrainOptions& options) {
  if (!settings.progress.measured || session.size() == 1) return nullptr;
  const bool cxx_model_loop = !options.model_side && options.torch != nullptr;
  const bool feeds = me.role != Role::model && !settings.replay_from_memory;
  if (me.role == Role::data ? !feeds : !cxx_model_loop) return nullptr;
  return std::make_unique<ProgressWatchdog>(session, settings.progress, role_name(me),
                                            abort_grace_s(settings.timeout_s));
}

void write_rank_stats(const MpiSession& session, const fs::path& run_dir, json& rank_stats) {
  rank_stats["peak_rss_bytes"] = peak_rss_bytes();
  fs::create_directories(run_dir / "ranks");
  write_file_atomically(run_dir / "ranks" / ("rank-" + std::to_string(session.rank()) + ".json"),
                        rank_stats.dump(2) + "\n");
}

}  // namespace

int run_train(const MpiSession& session, const config::Config& given, const TrainOptions& options) {
  RankAnnouncement announce = options.announce;
  announce.resume = options.resume;
  config::Config agreed = given;  // rank 0's when Python ranks take part
  const JobAgreement job = agree_on_job(session, announce, agreed);
  auto reader = open_training_cache(agreed);
  // features.*, text.* and the other settings prep recorded are the cache's (cache_agreement.h):
  // from here on `config` is what the run trains on, and what RUN_DIR/sluice-train.yaml says.
  const config::Config config = agree_with_cache(agreed, reader.manifest(), reader.dir());
  const TrainSettings settings = with_mixture_indices(TrainSettings::read(config), reader);
  std::optional<FileLock> run_dir_lock;  // held to the end of the run
  claim_run_dir(session, settings, reader, options, run_dir_lock);
  const RunSetup setup = plan_run(session, config, settings, reader, options, job);
  // Past every refusal (a refused run leaves an earlier one's files as they were), before any rank
  // writes its per-rank files (at the end of the run).
  if (session.rank() == 0) set_aside_earlier_attempt(settings.run_dir);
  const RankPlacement& me = setup.roles.at(session.rank());
  const int compute_threads = set_up_compute(session, settings, me, options.torch);

  transport::ChannelOptions channel;
  channel.slots = settings.credits;
  channel.slot_bytes = max_batch_bytes(setup.schedule->shapes(), reader.n_mels());
  channel.timeout_s = settings.timeout_s;

  // Timing: every rank records its stages; clocks are aligned to rank 0's at start and at end.
  RankTiming rank_timing(session, config, timeline_identity(session, config, me, setup.roles.transport));
  RankContext context;
  context.delay = rank_timing.delay();
  context.compute_threads = compute_threads;
  StatusBoard status(session, settings.status_every_s);
  context.status = &status;
  // Beats only to the ranks this one waits on and that wait on it (O(log ranks), not ranks - 1).
  session.limit_heartbeat(heartbeat_peers(setup.roles, session.rank(), session.size()));
  FinishLine finish(session, settings.timeout_s, finish_line_watchers(session, setup, me));
  context.finish = &finish;
  const std::unique_ptr<ProgressWatchdog> watchdog = make_progress_watchdog(session, settings, me, options);
  context.watchdog = watchdog.get();
  context.features = feature_settings(settings, reader);
  // Outlives the feeder and its batches (pinned memory).
  const std::unique_ptr<DataSide> data_side =
      make_data_side(session, settings, setup, me, context.features, channel.slot_bytes, options.torch);

  FeedOptions feed;
  feed.reader_threads = settings.reader_threads;
  feed.read_ahead = settings.read_ahead;
  feed.rank = session.rank();
  feed.delay = context.delay;
  if (data_side) {
    feed.batch_memory = data_side->batch_memory();
    feed.work = data_side->work();
  }
  const ModelSide model_side = model_side_of(options);
  RankRun run{session, settings, setup, reader, me, channel, feed, context, rank_timing.timeline(), status,
              model_side};
  json rank_stats;
  try {
    run_role(run, rank_stats);
    // This rank's part is over: the others' pace is theirs (the heartbeat still names a silent one).
    if (watchdog) watchdog->begin_phase(ProgressWatchdog::Phase::done);
    rank_stats["progress_deadline"] =
        watchdog ? watchdog->to_json()
                 : json{{"role", role_name(me)}, {"mode", settings.progress.measured ? "unwatched" : "fixed"}};
    finish.wait_for_everyone();
  } catch (const Error& error) {
    if (watchdog) watchdog->begin_phase(ProgressWatchdog::Phase::done);  // the error ends this rank, not a stall
    rank_timing.write_failed(settings.run_dir, error.what(), context.waiting_for, rank_stats);
    throw;
  }
  write_rank_stats(session, settings.run_dir, rank_stats);
  const bool stopped = stop_requested() || context.stopped;
  rank_timing.write_finished(settings.run_dir, stopped ? "stopped" : "finished", rank_stats, timeline_tag);
  return stopped ? train_stopped : 0;
}

}  // namespace sluice::runtime
