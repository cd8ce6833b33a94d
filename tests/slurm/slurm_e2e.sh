#!/usr/bin/env bash
# sluice under a real single-node Slurm (munged, slurmctld, slurmd from Debian, on localhost):
#   1. `srun -n 3 sluice prep` on the sample corpus, then `sluice cache verify`
#   2. the Slurm topology check refuses a step whose task count is not MPI's world size; the exit
#      codes of the contract under srun (a run directory below a file: 2, said once; a resume as
#      another model size: 2, said by the model rank)
#   3. `sbatch slurm/train.sbatch` with srun (20 steps), and with SLUICE_LAUNCHER=mpirun (3 steps)
#   4. preemption round trips: `scancel --signal=USR1 --batch` (the time-limit signal) and
#      `scontrol requeue` (SIGTERM, as scheduler preemption) mid-run -> the ranks checkpoint and
#      exit 4 -> the job is requeued -> the requeued run adds --resume and finishes; its losses
#      equal the uninterrupted run's from the checkpoint's step on (the next unseen batch); and
#      `scancel`: checkpoint, exit 4, the job stays cancelled
#   5. slurm/prep.sbatch with both launchers (a rerun keeps every shard)
# With MODE `restart` (a test of its own), after step 1 only:
#   6. in-job restart: `sbatch slurm/train.sbatch` (which runs the step under `sluice supervise`);
#      model rank 1 is killed with SIGKILL from outside mid-run -> srun ends the step -> the
#      supervisor starts it again in the same allocation with --resume (no requeue) -> the job
#      completes; restarts.json names the rank, its host and the signal
# Every wait has a deadline; an EXIT trap cancels the jobs and stops the daemons by pid.
#
#   tests/slurm/slurm_e2e.sh SLUICE_BINARY SAMPLE_CORPUS REPO_ROOT [all|restart]
# Exit 0 passed, 1 failed, 77 skipped (not root, or Slurm/munge not installed).
set -uo pipefail

sluice=$1 corpus=$2 repo=$3 mode=${4:-all}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# This test talks only to the Slurm it starts: drop any SLURM_* of a job or cluster it runs inside.
unset "${!SLURM_@}"
export PATH="$PATH:/usr/sbin:/sbin"   # the daemons, ip and runuser live there

skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "needs root to run slurmctld/slurmd/munged"
for tool in munged slurmctld slurmd srun sbatch squeue scontrol scancel sinfo; do
  command -v "$tool" >/dev/null || [ -x "/usr/sbin/$tool" ] || skip "$tool not installed (scripts/install-deps.sh installs slurmctld slurmd slurm-client munge)"
done
[ -f /etc/munge/munge.key ] || skip "/etc/munge/munge.key missing (the munge package makes it)"
[ -x "$sluice" ] || { echo "FAIL: $sluice is not executable"; exit 1; }
[ -f "$corpus/metadata.csv" ] || { echo "FAIL: no sample corpus at $corpus (scripts/make-sample-corpus.sh)"; exit 1; }

# shellcheck source=tests/slurm/local_slurm.sh
source "$here/local_slurm.sh"
work=$(mktemp -d /tmp/sluice-slurm-e2e.XXXXXX)
chmod 0755 "$work"
failures=0
cleanup() {
  local_slurm_stop
  # Anything still running from this test's directory is ours: stop it by pid.
  local leftover
  leftover=$(pgrep -f -- "$work" || true)
  if [ -n "$leftover" ]; then
    echo "cleanup: stopping leftover processes $leftover"
    kill -KILL $leftover 2>/dev/null || true
  fi
  if [ "$failures" -eq 0 ] && [ -z "${KEEP_WORK:-}" ]; then rm -rf "$work"; else echo "logs kept in $work"; fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM

fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
check() {  # check DESCRIPTION ACTUAL EXPECTED
  if [ "$2" == "$3" ]; then echo "ok: $1 = $2"; else fail "$1: got '$2', expected '$3'"; fi
}
check_grep() {  # check_grep DESCRIPTION PATTERN FILE
  if grep -qE -- "$2" "$3"; then echo "ok: $1"; else fail "$1: no line matching '$2' in $3"; tail -n 30 "$3"; fi
}
json() { /usr/bin/python3 -c "import json,sys; print(json.load(open(sys.argv[1]))$2)" "$1" 2>/dev/null || echo "<no $1>"; }
job_field() { scontrol show job "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -1; }
# Waits until job $1 has left the queue (deadline $2 s); prints its final state.
wait_job() {
  local deadline=$(( $(date +%s) + $2 ))
  while [ "$(date +%s)" -lt "$deadline" ]; do
    [ -z "$(squeue -h -j "$1" -o %T 2>/dev/null)" ] && { job_field "$1" JobState; return 0; }
    sleep 0.2
  done
  echo "TIMEOUT"
  return 1
}
# Waits until file $1 has a line matching $2 (deadline $3 s).
wait_line() {
  local deadline=$(( $(date +%s) + $3 ))
  while [ "$(date +%s)" -lt "$deadline" ]; do
    grep -qE -- "$2" "$1" 2>/dev/null && return 0
    sleep 0.2
  done
  return 1
}

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
# A daemon left by an earlier run of this test that was killed outright (SIGKILL runs no trap)
# would hold the ports: stop it by its pid file.
for stale in /tmp/sluice-slurm-e2e.*/slurm; do
  [ -d "$stale" ] && [ "$stale" != "$work/slurm" ] || continue
  for pid_file in "$stale/slurmctld.pid" "$stale/slurmd.pid" "$stale/munge/munged.pid"; do
    if [ -s "$pid_file" ] && kill -0 "$(cat "$pid_file")" 2>/dev/null; then
      echo "stopping the daemons of a killed run in $stale"
      LOCAL_SLURM_DIR=$stale SLURM_CONF=$stale/slurm.conf local_slurm_stop
      break
    fi
  done
done
local_slurm_start "$work/slurm" || { fail "Slurm did not start"; exit 1; }
cd "$work" || exit 1

echo "== 1. srun -n 3 sluice prep"
started=$(date +%s)
timeout -k 5 300 srun -n 3 --mpi=pmix "$sluice" prep --corpus "$corpus" --out "$work/cache" \
  --set cache.shard_size=32 >"$work/prep.out" 2>&1
check "srun prep exit code" "$?" 0
echo "   ($(( $(date +%s) - started )) s)"
check_grep "prep ran 3 ranks" "120 rows; 3 rank\(s\)" "$work/prep.out"
for r in 0 1 2; do check_grep "prep summary lists rank $r" "^$r +$(hostname -s | cut -c1-14) " "$work/prep.out"; done  # 14: the column
check_grep "prep wrote 120 samples" "^total: 120 samples, 0 rejects" "$work/prep.out"
check "manifest samples" "$(json "$work/cache/manifest.json" "['totals']['samples']")" 120
timeout 120 "$sluice" cache verify "$work/cache" >"$work/verify.out" 2>&1
check "cache verify exit code" "$?" 0

submit() {  # submit NAME LAUNCHER ARGS -> job id
  CACHE="$work/cache" RUN_DIR="$work/$1" SLUICE="$sluice" SLUICE_LAUNCHER=$2 SLUICE_ARGS=$3 \
    timeout 30 sbatch --parsable --job-name="$1" --nodes=1 --ntasks-per-node=3 --cpus-per-task=1 --time=10 \
    --output="$work/$1.out" "$repo/slurm/train.sbatch"
}

if [ "$mode" = restart ]; then
  echo "== 6. in-job restart: a model rank killed (SIGKILL) mid-run; the supervisor restarts the step"
  job=$(submit restarted srun "--steps 20 --set train.batch_size=4 --set train.n_buckets=2 --set train.log_every=1 --set train.checkpoint_every=4")
  if wait_line "$work/restarted.out" "step 6/20" 240; then
    victim=""
    # Looked for a few times: once seen missing under a loaded machine (ctest -j2 beside two
    # training jobs), then found when run again.
    for attempt in 1 2 3 4 5 6 7 8 9 10; do
      for p in /proc/[0-9]*; do
        tr '\0' '\n' 2>/dev/null <"$p/environ" | grep -qx SLURM_PROCID=1 || continue
        tr '\0' ' ' 2>/dev/null <"$p/cmdline" | grep -q -- "$work/restarted" && victim=${p#/proc/} && break
      done
      [ -n "$victim" ] && break
      sleep 0.5
    done
    if [ -n "$victim" ]; then
      kill -KILL "$victim"
      killed_at=$(date +%s.%N)
      state=$(wait_job "$job" 300)
      echo "   the job ended $(awk -v a="$killed_at" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s after the kill"
      check "restarted: final state" "$state" COMPLETED
      check "restarted: exit code" "$(job_field "$job" ExitCode)" "0:0"
      check "restarted: not requeued" "$(job_field "$job" Restarts)" 0
      check_grep "restarted: the supervisor named the killed rank" "restart 1 of 3: rank 1 \(host [^)]*\) was killed by signal 9" "$work/restarted.out"
      check_grep "restarted: the second round resumed" "round 2: srun --mpi=pmix --kill-on-bad-exit=1 .* --resume" "$work/restarted.out"
      check "restarted: restarts.json fault" "$(json "$work/restarted/restarts.json" "['restarts'][0]['fault']['kind']")" killed
      check "restarted: restarts.json rank" "$(json "$work/restarted/restarts.json" "['restarts'][0]['fault']['rank']")" 1
      check "restarted: restarts.json outcome" "$(json "$work/restarted/restarts.json" "['outcome']")" finished
      check "restarted: latest.json after the run" "$(json "$work/restarted/checkpoints/latest.json" "['global_step']")" 20
      echo "   lost from the kill to training again: $(json "$work/restarted/restarts.json" "['restarts'][0]['lost_s']") s"
    else
      fail "restarted: rank 1's process not found"
    fi
  else
    fail "restarted: the run did not reach step 6 in 240 s"; tail -n 30 "$work/restarted.out"
  fi
  echo "== slurm restart: $failures failure(s)"
  [ "$failures" -eq 0 ]
  exit
fi

echo "== 2. topology check: a step of 3 tasks seen by a one-rank MPI world"
env SLURM_JOB_ID=1 SLURM_STEP_ID=0 SLURM_STEP_NUM_TASKS=3 SLURM_PROCID=2 SLURM_LOCALID=2 \
  timeout 60 "$sluice" prep --corpus "$corpus" --out "$work/cache-refused" >"$work/refused.out" 2>&1
check "disagreement exit code" "$?" 2
check_grep "disagreement names both values" "SLURM_STEP_NUM_TASKS=3 but the MPI world has 1 rank" "$work/refused.out"

echo "== 2b. the contract's exit codes under srun: an error on every rank, and one rank's own"
echo x >"$work/a-file"
timeout 60 srun -n 3 --mpi=pmix --kill-on-bad-exit=1 "$sluice" train --cache "$work/cache" --run-dir "$work/a-file/run" \
  --steps 4 >"$work/no-run-dir.out" 2>&1
check "run directory below a file: srun exit code" "$?" 2
check "said once" "$(grep -c 'cannot create the run directory' "$work/no-run-dir.out")" 1
timeout 120 srun -n 2 --mpi=pmix --kill-on-bad-exit=1 "$sluice" train --cache "$work/cache" --run-dir "$work/sized" \
  --steps 4 --set train.batch_size=4 >"$work/sized.out" 2>&1
check "a tiny model's run exit code" "$?" 0
timeout 120 srun -n 2 --mpi=pmix --kill-on-bad-exit=1 "$sluice" train --cache "$work/cache" --run-dir "$work/sized" \
  --steps 8 --resume --set train.batch_size=4 --set model.size=small >"$work/resized.out" 2>&1
check "resumed as another model size: srun exit code" "$?" 2
check_grep "the model rank says why" "rank 1 @ .* config error: model: checkpoint .* was written for model" "$work/resized.out"

train_args="--steps 20 --set train.batch_size=4 --set train.n_buckets=2 --set optim.warmup_steps=10 --set train.log_every=5"

echo "== 3a. sbatch slurm/train.sbatch (srun, 20 steps)"
job=$(submit straight srun "$train_args")
state=$(wait_job "$job" 300)
check "train job state" "$state" COMPLETED
check "train job exit code" "$(job_field "$job" ExitCode)" "0:0"
check_grep "role table: rank 0 is the data rank feeding 1,2" "^  0 +$(hostname -s | cut -c1-16) +cpu +data +feeds 1,2" "$work/straight.out"
check_grep "train.sbatch launched with srun --mpi=pmix" "round 1: srun --mpi=pmix" "$work/straight.out"
check "latest.json global_step" "$(json "$work/straight/checkpoints/latest.json" "['global_step']")" 20
check "rank-1 steps" "$(json "$work/straight/ranks/rank-1.json" "['steps']")" 20

echo "== 3b. sbatch slurm/train.sbatch with SLUICE_LAUNCHER=mpirun (3 steps)"
job=$(submit viampirun mpirun "--steps 3 --set train.batch_size=4 --set train.n_buckets=2")
state=$(wait_job "$job" 300)
check "mpirun train job state" "$state" COMPLETED
check_grep "train.sbatch launched with mpirun" "round 1: mpirun --host [^ ]* -np 3 --bind-to none" "$work/viampirun.out"
check_grep "mpirun role table has 3 ranks" "^role plan \(3 rank\(s\), transport mpi\)" "$work/viampirun.out"
check "mpirun latest.json global_step" "$(json "$work/viampirun/checkpoints/latest.json" "['global_step']")" 3

# A run stopped mid-way and requeued: `how` = usr1 (the time-limit signal, sent with scancel; the
# script requeues the job on exit 4) or requeue (`scontrol requeue`, as scheduler preemption does:
# SIGTERM to every task, Slurm requeues the job itself).
preempt_round_trip() {
  local name=$1 how=$2 signal job state signalled stopped_at same
  job=$(submit "$name" srun "$train_args")
  if ! wait_line "$work/$name.out" "step 5/20" 240; then
    fail "$name: the run did not reach step 5 in 240 s"; tail -n 30 "$work/$name.out"; return
  fi
  signalled=$(date +%s.%N)
  if [ "$how" = usr1 ]; then
    signal=SIGUSR1
    timeout 30 scancel --signal=USR1 --batch "$job"
    check "$name: scancel --signal=USR1 --batch exit code" "$?" 0
  else
    signal=SIGTERM
    timeout 30 scontrol requeue "$job"
    check "$name: scontrol requeue exit code" "$?" 0
  fi
  wait_line "$work/$name.out" "sluice exited with 4" 120 || fail "$name: no exit 4 within 120 s of $signal"
  stopped_at=$(sed -n "s/.*$signal received: stopped after global step \([0-9]*\) .*/\1/p" "$work/$name.out" | head -1)
  echo "   $name: stopped after global step ${stopped_at:-?}, $(awk -v a="$signalled" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s after $signal"
  if [ -z "$stopped_at" ] || [ "$stopped_at" -lt 5 ] || [ "$stopped_at" -ge 20 ]; then
    fail "$name: stop step '$stopped_at' not in [5, 20)"; return
  fi
  [ "$how" = usr1 ] && check_grep "$name: the script requeued the job" "requeueing job $job to resume" "$work/$name.out"
  state=$(wait_job "$job" 400)
  check "$name: final state" "$state" COMPLETED
  check "$name: restarts" "$(job_field "$job" Restarts)" 1
  check "$name: exit code" "$(job_field "$job" ExitCode)" "0:0"
  check_grep "$name: the requeued run resumed (run 2)" "resuming from .*latest.json \(run 2 of job $job\)" "$work/$name.out"
  check_grep "$name: the requeued run passed --resume" "^train.sbatch: .* --resume" "$work/$name.out"
  check_grep "$name: resumed at the checkpoint's step" "resumed from step-0*${stopped_at}\.pt at global step ${stopped_at}\$" "$work/$name.out"
  check "$name: exit codes of the two runs" "$(sed -n 's/.*sluice exited with \([0-9]*\)$/\1/p' "$work/$name.out" | tr '\n' ' ')" "4 0 "
  check "$name: checkpoint of the stop kept" "$(printf "%s\n" "$work/$name/checkpoints"/step-*.pt | grep -c "/step-0*${stopped_at}\.pt$")" 1
  check "$name: latest.json after the resumed run" "$(json "$work/$name/checkpoints/latest.json" "['global_step']")" 20
  check "$name: resumed run's steps" "$(json "$work/$name/ranks/rank-1.json" "['steps']")" $((20 - stopped_at))
  # The next unseen batch: the resumed run's losses are the uninterrupted run's from that step on.
  same=$(/usr/bin/python3 - "$work/straight/ranks/rank-1.json" "$work/$name/ranks/rank-1.json" "$stopped_at" <<'PY'
import json, sys
straight = json.load(open(sys.argv[1]))["losses"]
resumed = json.load(open(sys.argv[2]))["losses"]
step = int(sys.argv[3])
expected = straight[step:]
print("equal" if len(resumed) == len(expected) and all(abs(a - b) <= 1e-6 * abs(b) for a, b in zip(resumed, expected))
      else f"differ: resumed {resumed[:3]}... expected {expected[:3]}...")
PY
)
  check "$name: resumed losses vs the uninterrupted run's from step $stopped_at" "$same" equal
}

echo "== 4a. time-limit signal: scancel --signal=USR1 --batch mid-run -> exit 4 -> the script requeues -> resume"
preempt_round_trip preempted usr1
echo "== 4b. preemption: scontrol requeue mid-run -> SIGTERM -> exit 4 -> Slurm requeues -> resume"
preempt_round_trip requeued requeue

echo "== 4c. scancel mid-run -> SIGTERM -> checkpoint, exit 4, and the job stays cancelled"
job=$(submit cancelled srun "$train_args")
if wait_line "$work/cancelled.out" "step 5/20" 240; then
  timeout 30 scancel "$job"
  check "cancelled: final state" "$(wait_job "$job" 120)" CANCELLED
  check "cancelled: restarts" "$(job_field "$job" Restarts)" 0
  check_grep "cancelled: the script did not requeue" "stopped with a checkpoint after SIGTERM; not requeueing" "$work/cancelled.out"
  stopped_at=$(sed -n 's/.*SIGTERM received: stopped after global step \([0-9]*\) .*/\1/p' "$work/cancelled.out" | head -1)
  check "cancelled: latest.json is the stop's checkpoint" "$(json "$work/cancelled/checkpoints/latest.json" "['global_step']")" "${stopped_at:-none}"
else
  fail "cancelled: the run did not reach step 5 in 240 s"; tail -n 30 "$work/cancelled.out"
fi

echo "== 5. slurm/prep.sbatch with srun and with mpirun (a rerun keeps every shard)"
for launcher in srun mpirun; do
  job=$(CORPUS="$corpus" CACHE="$work/cache-sbatch" SLUICE="$sluice" SLUICE_LAUNCHER=$launcher \
        SLUICE_ARGS="--set cache.shard_size=32" timeout 30 sbatch --parsable --nodes=1 --ntasks-per-node=2 \
        --cpus-per-task=2 --time=10 --output="$work/prep-$launcher.out" "$repo/slurm/prep.sbatch")
  check "prep.sbatch ($launcher) state" "$(wait_job "$job" 300)" COMPLETED
  check_grep "prep.sbatch ($launcher) ran 2 ranks" "120 rows; 2 rank\(s\)" "$work/prep-$launcher.out"
done
check "shards kept by the mpirun rerun" "$(awk '$1 ~ /^[0-9]+$/ && NF == 9 { kept += $4 } END { print kept + 0 }' "$work/prep-mpirun.out")" 4
check "prep.sbatch cache samples" "$(json "$work/cache-sbatch/manifest.json" "['totals']['samples']")" 120

echo "== slurm e2e: $failures failure(s); Slurm started in ${LOCAL_SLURM_START_SECONDS:-?} s"
[ "$failures" -eq 0 ]
