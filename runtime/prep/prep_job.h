#pragma once
// `sluice prep`: the offline, MPI-parallel cache preparation job.
//
// Protocol (every exchange has the runtime.timeout_s deadline, see common/mpi_session.h):
//  1. Rank 0 reads the corpus listing (metadata only) and broadcasts it, encoded, to the others
//     (runtime/prep/listing_share.h): a corpus listed in 44k transcript files costs one rank's
//     opens on the shared file system, not every rank's. It needs no other rank, so the launcher
//     starts it on a thread before MPI starts (start_listing): listing a large corpus on shared
//     storage and MPI's own start-up then overlap; the others wait with rank 0's keepalives and
//     the runtime.timeout_s deadline. An error of the listing is rank 0's, said once and ended
//     with the same exit code on every rank.
//  2. Rank r probes the audio headers of items r, r+N, r+2N, ... (duration, size, mtime) and
//     sends them to rank 0 (steps 2-3: runtime/prep/plan_agreement.h).
//  3. Rank 0 computes the fingerprint (settings + vocabulary + listing + every file's size and
//     mtime), checks it against an existing cache, cuts the corpus into shards of
//     cache.shard_size rows, orders them by audio duration (longest first), and broadcasts this
//     plan.
//  4. Each rank writes shards (runtime/prep/coordinator.h): its first is the plan's (rank r
//     takes the r-th longest); when fewer than 2 of its shards are left unbegun it asks rank 0,
//     whose ShardDispenser answers
//     with the next ones in the plan's order (prep_plan.h), so faster ranks write more and all
//     finish together. A pool of decode/feature threads, one HDF5 writer thread; shards written
//     under temporary names and renamed when complete. Shards already complete with the same
//     fingerprint are kept. Heartbeats go up the rank tree (common/heartbeat_tree.h,
//     common/rank_tree.h): every prep.progress_interval_s a rank sends its parent the
//     progress of its subtree and pings its children, so rank 0 hears from 7 x log8(ranks) ranks,
//     not all of them. Silence for longer than runtime.timeout_s is an error naming the silent
//     rank: rank 0 names it (from the parent's beat when it is further down), its children name
//     it as their silent parent.
//     Rank 0 holds CACHE_DIR/prep.lock (flock) from step 3 to the end: a second prep into the
//     same directory is refused at once, naming the holder (common/file_lock.h).
//  5. Each rank sends rank 0 its result (runtime/prep/rank_result.h). Only when every rank
//     succeeded does rank 0 write rejects.jsonl, index.h5 and, last, manifest.json
//     (runtime/prep/finalize.h); then it broadcasts the exit code.
// The settings are read once (runtime/prep/prep_settings.h); the tags: runtime/prep/prep_protocol.h.
#include <future>

#include "common/config.h"
#include "common/mpi_session.h"
#include "dataset/corpus.h"

namespace sluice::runtime {

// Exit codes of `sluice prep`.
constexpr int prep_ok = 0;
constexpr int prep_failed = 1;
constexpr int prep_refused = 2;        // existing cache made with other settings/inputs
constexpr int prep_too_many_rejects = 3;
// The machine refused (no space left on the device, a quota, a read-only file system, no
// permission): the log names the file and what to do; the finished shards are kept and a rerun
// resumes. The same code as the launcher's for ErrorKind::environment.
constexpr int prep_environment = 5;

// Step 1 on a thread of its own: the listing of `config`'s corpus.path. Call it before MPI starts;
// the future holds the reader's error, if any, which run_prep shares. On a rank the launcher names
// as other than 0 it reads nothing (an empty future).
std::future<dataset::CorpusListing> start_listing(const config::Config& config);

// Runs the job on every rank of `session`, with `listing` from start_listing(config); returns the
// same exit code on every rank.
int run_prep(const MpiSession& session, const config::Config& config,
             std::future<dataset::CorpusListing> listing);

}  // namespace sluice::runtime
