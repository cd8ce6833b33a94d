#!/usr/bin/env bash
# Chaos benchmark of the in-job restart (`sluice supervise`, supervisor/supervisor.h): a CPU train
# run of STEPS global steps (4 ranks under mpirun: 1 data + 3 model ranks) during which this script
# injects FAULTS faults from outside at random steps, alternately SIGKILL of a random rank and
# SIGSTOP of a random rank (named silent after runtime.timeout_s). The supervisor restarts the job
# from its last checkpoint each time. Prints:
#   - goodput = useful step time / wall time of the supervised run, where useful step time is the
#     time between consecutive step lines (train.log_every=1) of the steps that count (a failed
#     round's steps past the checkpoint it resumed from are lost work, not useful); the same
#     number for an uninterrupted run of the same steps on the same machine, measured in the same
#     invocation (its startup and checkpoints are overhead too), and the ratio of the two
#   - per fault: what it was, the step, and the seconds from the fault to training again
#     (restarts.json lost_s: to the first step line of the next round)
# A benchmark, not a test: it asserts nothing. docs/performance.md, "In-job restart under faults".
#
#   bench/chaos/chaos.sh [BUILD_DIR] [STEPS] [FAULTS] [SEED]     default: build 300 4 1
set -uo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
steps=${2:-300}
faults=${3:-4}
seed=${4:-1}
sluice=$PWD/$build/launcher/sluice
corpus=$PWD/$build/sample-corpus
timeout_s=${CHAOS_TIMEOUT_S:-5}
[ -x "$sluice" ] || { echo "no $sluice: build it first" >&2; exit 1; }
[ -f "$corpus/metadata.csv" ] || { echo "no sample corpus at $corpus" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
work=$(mktemp -d /tmp/sluice-chaos.XXXXXX)
sup=""
cleanup() { [ -n "$sup" ] && kill -KILL -- -"$sup" 2>/dev/null; [ -z "${KEEP_WORK:-}" ] && rm -rf "$work"; }
trap cleanup EXIT

"$sluice" prep --corpus "$corpus" --out "$work/cache" --set cache.shard_size=32 >"$work/prep.out" 2>&1 ||
  { cat "$work/prep.out"; exit 1; }
train=(train --cache "$work/cache" --steps "$steps" --set train.batch_size=4 --set train.n_buckets=1
       --set train.log_every=1 --set train.checkpoint_every=10 --set train.validation_every=0
       --set runtime.timeout_s="$timeout_s" --set runtime.status_every_s=0)

# The uninterrupted run.
start=$(date +%s.%N)
mpirun -np 4 --bind-to none "$sluice" "${train[@]}" --run-dir "$work/plain" >"$work/plain.out" 2>&1 ||
  { tail -n 30 "$work/plain.out"; exit 1; }
plain_wall=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')

# The fault steps: FAULTS steps spread over [20, STEPS - 20], at least 30 apart.
mapfile -t targets < <(/usr/bin/python3 - "$steps" "$faults" "$seed" <<'PY'
import random, sys
steps, faults, seed = map(int, sys.argv[1:])
rng = random.Random(seed)
span = (steps - 40) // faults
for i in range(faults):
    print(20 + i * span + rng.randrange(max(1, span - 30)))
PY
)

# The supervised run, in its own process group.
start=$(date +%s.%N)
setsid "$sluice" supervise --launcher mpirun -n 4 --launcher-arg=--bind-to --launcher-arg=none \
  --max-restarts $((faults + 2)) --leave-out-after 0 --run-dir "$work/chaos" -- "${train[@]}" >"$work/chaos.out" 2>&1 &
sup=$!
offset=0
RANDOM=$seed
: >"$work/faults.tsv"
for i in "${!targets[@]}"; do
  target=${targets[$i]}
  # Wait for the target step in the current round (lines after the last fault).
  while kill -0 "$sup" 2>/dev/null; do
    n=$(tail -n +$((offset + 1)) "$work/chaos.out" | sed -n 's/.*step \([0-9]*\)\/[0-9]* (epoch.*/\1/p' | tail -1)
    [ -n "$n" ] && [ "$n" -ge "$target" ] && break
    sleep 0.05
  done
  kill -0 "$sup" 2>/dev/null || break
  rank=$((RANDOM % 4))
  signal=KILL
  [ $((i % 2)) -eq 1 ] && signal=STOP
  victim=""
  for p in /proc/[0-9]*; do
    tr '\0' '\n' 2>/dev/null <"$p/environ" | grep -qx "OMPI_COMM_WORLD_RANK=$rank" || continue
    tr '\0' ' ' 2>/dev/null <"$p/cmdline" | grep -q -- "$work/chaos" && victim=${p#/proc/} && break
  done
  [ -n "$victim" ] || { echo "fault $i: rank $rank not found" >&2; continue; }
  kill -"$signal" "$victim"
  printf '%s\t%s\t%s\t%s\n' "$i" "$target" "$signal" "$rank" >>"$work/faults.tsv"
  offset=$(wc -l <"$work/chaos.out")
  # Wait for the next round to train before the next fault (and let a stopped rank go: the
  # launcher has killed it by then; this only makes sure).
  while kill -0 "$sup" 2>/dev/null && ! tail -n +$((offset + 1)) "$work/chaos.out" | grep -q "training again at step"; do
    sleep 0.05
  done
  kill -KILL "$victim" 2>/dev/null
  offset=$(wc -l <"$work/chaos.out")
done
wait "$sup"
code=$?
sup=""
chaos_wall=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')
[ "$code" -eq 0 ] || { echo "the supervised run exited $code"; tail -n 40 "$work/chaos.out"; exit 1; }

/usr/bin/python3 - "$work" "$plain_wall" "$chaos_wall" "$steps" <<'PY'
import datetime, json, re, sys
work, plain_wall, chaos_wall, steps = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
line = re.compile(r"^\[(\d\d):(\d\d):(\d\d\.\d+)\].* step (\d+)/\d+ \(epoch")

def rounds(path):
    """Per round (split at the supervisor's 'round N:' lines): [(step, seconds of day)] of its step lines."""
    out = [[]]
    for text in open(path, errors="replace"):
        if "[supervisor]" in text and re.search(r"round \d+: ", text) and out[-1]:
            out.append([])
        m = line.match(text)
        if m:
            h, mi, s, step = m.groups()
            out[-1].append((int(step), int(h) * 3600 + int(mi) * 60 + float(s)))
    return [r for r in out if r]

def useful(rs, ends):
    """Step time of the steps that count: in round i, the steps up to ends[i] (the checkpoint the
    next round resumed from); the first step line of a round has no predecessor and counts nothing."""
    total = 0.0
    for r, end in zip(rs, ends):
        for (s0, t0), (s1, t1) in zip(r, r[1:]):
            if s1 <= end and s1 == s0 + 1:
                total += (t1 - t0) % 86400
    return total

plain = rounds(f"{work}/plain.out")
plain_useful = useful(plain, [steps])
record = json.load(open(f"{work}/chaos/restarts.json"))
chaos = rounds(f"{work}/chaos.out")
ends = [r["resumed_from_step"] for r in record["restarts"]] + [steps]
chaos_useful = useful(chaos, ends)
g_plain, g_chaos = plain_useful / plain_wall, chaos_useful / chaos_wall
print(f"steps {steps}, faults {len(record['restarts'])}, rounds {len(record['rounds'])}, outcome {record['outcome']}")
print(f"uninterrupted: wall {plain_wall:.1f} s, useful step time {plain_useful:.1f} s, goodput {g_plain:.3f}")
print(f"with faults:   wall {chaos_wall:.1f} s, useful step time {chaos_useful:.1f} s, goodput {g_chaos:.3f}")
print(f"goodput ratio (faults / uninterrupted): {g_chaos / g_plain:.3f}")
faults = [l.split("\t") for l in open(f"{work}/faults.tsv").read().splitlines()]
print("fault  signal  rank  at step  named as                          resumed from  training again at  lost s")
for (i, target, signal, rank), r in zip(faults, record["restarts"]):
    f = r["fault"]
    named = f"{f['kind']} rank {f['rank']}" + (f" ({f.get('silent_s', 0):.1f} s)" if f["kind"] == "silent" else "")
    lost = r["lost_s"]
    print(f"{i:>5}  {signal:<6}  {rank:>4}  {r['failed_round_last_step']:>7}  {named:<32}  {r['resumed_from_step']!s:>12}"
          f"  {r['first_step_again']!s:>17}  {lost if lost is None else f'{lost:.1f}':>6}")
lost = [r["lost_s"] for r in record["restarts"] if r["lost_s"] is not None]
if lost:
    print(f"lost per fault: mean {sum(lost) / len(lost):.1f} s, max {max(lost):.1f} s")
PY
