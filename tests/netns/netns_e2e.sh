#!/usr/bin/env bash
# sluice train across two "hosts" on one machine (network namespaces with their own addresses
# and host names, see netns_hosts.sh; mpirun starts the remote orted through netns_rsh_agent.sh,
# and ranks on different nodes talk TCP between 10.77.0.1 and 10.77.0.2).
#
#   tests/netns/netns_e2e.sh two-nodes SLUICE_BINARY SAMPLE_CORPUS
#       2 nodes x 2 ranks: the role plan places one data rank per node, each feeding the model
#       rank on its own node; asserts on the printed role table and RUN_DIR/ranks/rank-N.json
#   tests/netns/netns_e2e.sh link-cut SLUICE_BINARY SAMPLE_CORPUS
#       the same job with runtime.timeout_s=4; node1's link is cut (ip link set ... down) after
#       step 5: a survivor on node0 names the unreachable rank 3 and its host (the heartbeat's
#       warning at half the deadline, then the all-reduce's error at the deadline), no rank on
#       node0 is blamed, and the job exits non-zero within 2 x runtime.timeout_s of the cut
#   tests/netns/netns_e2e.sh link-saturated SLUICE_BINARY SAMPLE_CORPUS
#       the 2 x 2 job for 26 steps (5 warm-up + 21 steady); node1's link is limited to 50 Mbit/s each way (tc tbf on both
#       ends of its cable) once the run has measured its all-reduce baseline on the full link
#       (after step 2). Each data rank feeds the model rank on its own node, so only the gradient
#       all-reduce between model ranks 1 (node0) and 3 (node1) crosses the link. The report must say
#       communication-bound (exposed all-reduce) with cause network_slower_than_baseline, name the
#       hosts the all-reduce crosses, an effective rate at most the link's, no straggler and no
#       descheduled rank, and not input-bound (docs/report.md)
#   tests/netns/netns_e2e.sh restart-leave-out SLUICE_BINARY SAMPLE_CORPUS
#       the 2 x 2 job under `sluice supervise --hosts node0:2,node1:2`; model rank 3 (node1) is
#       killed with SIGKILL after step 4: the supervisor names it and its host, leaves node1 out,
#       and the next round runs on node0 alone (an elastic resume from 2 model ranks to 1) to the
#       end of the epoch, every sample trained once
#
# Every process the test starts is stopped (by pid: whatever is left in its namespaces) and every
# namespace it creates is deleted, on any exit. Exit 0 passed, 1 failed, 77 skipped (not root, or
# no network namespaces here).
set -uo pipefail

mode=$1 sluice=$2 corpus=$3
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# Run inside a Slurm job (CI on a cluster), the job's SLURM_* values would make mpirun use Slurm
# instead of the rsh agent, and sluice check them against the namespaces: this test is not a Slurm job.
unset "${!SLURM_@}"
export PATH="$PATH:/usr/sbin:/sbin"   # the daemons, ip and runuser live there

skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "needs root for ip netns"
command -v ip >/dev/null && command -v unshare >/dev/null || skip "ip (iproute2) or unshare (util-linux) missing"
probe=slprobe$$
ip netns add "$probe" 2>/dev/null || skip "ip netns add fails here (no CAP_SYS_ADMIN/CAP_NET_ADMIN?)"
ip netns del "$probe"
unshare --uts --mount true 2>/dev/null || skip "unshare --uts --mount fails here"
[ -x "$sluice" ] || { echo "FAIL: $sluice is not executable"; exit 1; }
[ -f "$corpus/metadata.csv" ] || { echo "FAIL: no sample corpus at $corpus"; exit 1; }

# shellcheck source=tests/netns/netns_hosts.sh
source "$here/netns_hosts.sh"
work=$(mktemp -d /tmp/sluice-netns.XXXXXX)
failures=0
mpirun_pid=""
cleanup() {
  [ -n "$mpirun_pid" ] && kill -KILL "$mpirun_pid" 2>/dev/null
  netns_hosts_down
  if [ "$failures" -eq 0 ] && [ -z "${KEEP_WORK:-}" ]; then rm -rf "$work"; else echo "logs kept in $work"; fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM

fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
check() { if [ "$2" == "$3" ]; then echo "ok: $1 = $2"; else fail "$1: got '$2', expected '$3'"; fi; }
check_grep() {
  if grep -qE -- "$2" "$3"; then echo "ok: $1"; else fail "$1: no line matching '$2' in $3"; tail -n 30 "$3"; fi
}
json() { /usr/bin/python3 -c "import json,sys; print(json.load(open(sys.argv[1]))$2)" "$1" 2>/dev/null || echo "<no $1>"; }
now() { date +%s.%N; }
seconds_since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }

# The cache, made outside the namespaces by one process.
timeout 300 "$sluice" prep --corpus "$corpus" --out "$work/cache" --set cache.shard_size=32 >"$work/prep.out" 2>&1 ||
  { fail "prep failed"; cat "$work/prep.out"; exit 1; }

netns_hosts_up 2 "$work" || { fail "could not make the namespaces"; exit 1; }
printf 'node0 slots=2\nnode1 slots=2\n' >"$work/hostfile"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_plm_rsh_agent=$here/netns_rsh_agent.sh
# Only the test's addresses: the daemons' out-of-band channel and the MPI byte transfer.
export OMPI_MCA_oob_tcp_if_include=$NETNS_SUBNET.0/24 OMPI_MCA_btl_tcp_if_include=$NETNS_SUBNET.0/24
export OMPI_MCA_btl=self,vader,tcp

train_args=(--set train.batch_size=4 --set train.n_buckets=2 --set optim.warmup_steps=10 --set train.log_every=5)
# mpirun runs on node0 (its own host name node0, address 10.77.0.1); node1's orted through the agent.
start_job() {  # start_job OUT STEPS ARGS...
  local out=$1 steps=$2
  shift 2
  netns_run 0 timeout -k 5 300 mpirun --hostfile "$work/hostfile" -np 4 --bind-to none \
    "$sluice" train --cache "$work/cache" --run-dir "$work/run" --steps "$steps" "${train_args[@]}" "$@" >"$out" 2>&1 &
  mpirun_pid=$!
}
wait_line() {  # wait_line FILE PATTERN SECONDS
  local deadline=$(( $(date +%s) + $3 ))
  while [ "$(date +%s)" -lt "$deadline" ]; do
    grep -qE -- "$2" "$1" 2>/dev/null && return 0
    kill -0 "$mpirun_pid" 2>/dev/null || { grep -qE -- "$2" "$1" 2>/dev/null; return; }
    sleep 0.1
  done
  return 1
}

case $mode in
two-nodes)
  start_job "$work/train.out" 12
  wait "$mpirun_pid"
  check "exit code of the 2 x 2 run" "$?" 0
  mpirun_pid=""
  check_grep "role table: 4 ranks" "^role plan \(4 rank\(s\), transport mpi\)" "$work/train.out"
  check_grep "rank 0 on node0 is a data rank feeding rank 1" "^  0 +node0 +cpu +data +feeds 1\$" "$work/train.out"
  check_grep "rank 1 on node0 is a model rank fed by rank 0" "^  1 +node0 +cpu +model +fed by 0\$" "$work/train.out"
  check_grep "rank 2 on node1 is a data rank feeding rank 3" "^  2 +node1 +cpu +data +feeds 3\$" "$work/train.out"
  check_grep "rank 3 on node1 is a model rank fed by rank 2" "^  3 +node1 +cpu +model +fed by 2\$" "$work/train.out"
  for r in 0 2; do
    check "rank-$r.json role" "$(json "$work/run/ranks/rank-$r.json" "['role']")" data
    check "rank-$r.json batches sent" "$(json "$work/run/ranks/rank-$r.json" "['batches']")" 12
  done
  for r in 1 3; do
    check "rank-$r.json role" "$(json "$work/run/ranks/rank-$r.json" "['role']")" model
    check "rank-$r.json steps" "$(json "$work/run/ranks/rank-$r.json" "['steps']")" 12
  done
  check "latest.json global_step" "$(json "$work/run/checkpoints/latest.json" "['global_step']")" 12
  ;;
link-cut)
  timeout_s=4
  # Out-of-band keepalive: mpirun notices a node whose link is gone after about
  # keepalive_time + probes x intvl seconds of silence; set to the deadline, so that sluice's ranks
  # name what they waited for first. tcp_retries2=3 in the nodes' namespaces: a send to the lost
  # node (the abort's kill order) fails after ~3 s instead of Linux's ~15 min default.
  export OMPI_MCA_oob_tcp_keepalive_time=$timeout_s OMPI_MCA_oob_tcp_keepalive_intvl=1 OMPI_MCA_oob_tcp_keepalive_probes=2
  for i in 0 1; do ip netns exec "${NETNS_PREFIX}n$i" sh -c "echo 3 >/proc/sys/net/ipv4/tcp_retries2" || fail "cannot set tcp_retries2"; done
  start_job "$work/train.out" 100000 --set runtime.timeout_s=$timeout_s
  if ! wait_line "$work/train.out" "step 5/" 240; then
    fail "the run did not reach step 5 in 240 s"; tail -n 30 "$work/train.out"; exit 1
  fi
  cut=$(now)
  cut_clock=$(date +%H:%M:%S.%N)
  netns_link 1 down
  echo "link of node1 cut at step 5"
  deadline=$(( $(date +%s) + 60 ))
  while kill -0 "$mpirun_pid" 2>/dev/null && [ "$(date +%s)" -lt "$deadline" ]; do sleep 0.05; done
  exit_after=$(seconds_since "$cut")
  if kill -0 "$mpirun_pid" 2>/dev/null; then
    fail "the job still runs 60 s after the cut"
    rc=none
  else
    wait "$mpirun_pid"
    rc=$?
  fi
  mpirun_pid=""
  echo "job ended ${exit_after} s after the cut with exit code $rc (deadline 2 x $timeout_s s)"
  [ "$rc" != none ] && [ "$rc" -ne 0 ] && echo "ok: non-zero exit" || fail "exit code $rc, expected non-zero"
  awk -v t="$exit_after" -v limit=$((2 * timeout_s)) 'BEGIN { exit !(t <= limit) }' &&
    echo "ok: exited within 2 x runtime.timeout_s ($exit_after <= $((2 * timeout_s)))" ||
    fail "exited $exit_after s after the cut, more than 2 x runtime.timeout_s = $((2 * timeout_s)) s"
  # Who names the culprit first must not matter: every survivor's heartbeat names a silent rank
  # at half the deadline (2 s), before mpirun can give up on node1 (keepalive at 4 s, TCP
  # retransmission ~3 s), and the all-reduce's error names it at the deadline unless mpirun ended
  # the job first. Either way node1's rank 3 is named, and no rank on node0 is.
  named=$(grep -m1 -E '^\[[0-9:.]+\] \[rank [01] @ node0\].*rank 3 \(host node1\) (has given|gave) no sign of life' "$work/train.out" |
    sed -E 's/^\[([0-9:.]+)\].*/\1/')
  [ -n "$named" ] && echo "rank 3 named by a survivor $(/usr/bin/python3 -c "import sys
def s(t): h, m, x = t.split(':'); return int(h) * 3600 + int(m) * 60 + float(x)
print(f'{s(sys.argv[1]) - s(sys.argv[2][:15]):.2f}')" "$named" "$cut_clock") s after the cut"
  check_grep "a survivor on node0 names the unreachable rank 3 and its host" \
    "\[rank [01] @ node0\].*rank 3 \(host node1\) (has given|gave) no sign of life" "$work/train.out"
  if grep -qE "rank [01] \(host node0\) (has given|gave) no sign of life" "$work/train.out"; then
    fail "a rank on node0 was blamed: $(grep -m1 -E "rank [01] \(host node0\) (has given|gave) no sign of life" "$work/train.out")"
  else
    echo "ok: no rank on node0 is blamed"
  fi
  # mpirun says it lost node1's daemon ([[job,0],1]) in one of two ways, depending on whether
  # keepalive or a failed send notices first.
  check_grep "mpirun reports the lost connection to node1's daemon" \
    "Remote daemon: .* on node node1|\[\[[0-9]+,0\],0\]-\[\[[0-9]+,0\],1\] .*unable to send" "$work/train.out"
  ;;
link-saturated)
  rate_mbit=50
  start_job "$work/train.out" 26 --set train.validation_every=0 --set train.checkpoint_every=0 \
    --set train.log_every=1 --set runtime.status_every_s=0 --set runtime.timeout_s=120
  if ! wait_line "$work/train.out" "step 2/" 240; then
    fail "the run did not reach step 2 in 240 s"; tail -n 30 "$work/train.out"; exit 1
  fi
  netns_link_rate 1 "${rate_mbit}mbit" || { fail "tc tbf on node1's link failed"; exit 1; }
  echo "node1's link limited to $rate_mbit Mbit/s at step 2"
  wait "$mpirun_pid"
  check "exit code of the 2 x 2 run on a saturated link" "$?" 0
  mpirun_pid=""
  report=$work/run/report.json
  [ -f "$report" ] || { fail "no $report"; tail -n 30 "$work/train.out"; exit 1; }
  /usr/bin/python3 - "$report" "$rate_mbit" <<'PY' || failures=$((failures + 1))
import json, sys
report, rate = json.load(open(sys.argv[1])), float(sys.argv[2]) * 1e6 / 8
verdicts = {v["kind"]: v for v in report["verdicts"]}
for v in report["verdicts"]:
    print(f"  {v['kind']} {v['severity']}: {v['summary']}\n    -> {v['recommendation']}")
failed = []
def check(what, ok):
    print(("ok: " if ok else "FAIL: ") + what)
    if not ok: failed.append(what)
check("steady state enough", report["steady_state"]["enough"])
comm = verdicts.get("communication_bound")
check("a communication-bound verdict", comm is not None)
if comm:
    n = comm["numbers"]
    check(f"exposed is the all-reduce ({n.get('exposed')})", n.get("exposed") == "allreduce")
    check(f"cause network_slower_than_baseline ({n.get('cause')})", n.get("cause") == "network_slower_than_baseline")
    check(f"hosts named: {n.get('hosts')}", n.get("hosts") == ["node0", "node1"])
    eff = n.get("effective_bytes_per_s") or 0
    check(f"effective rate {eff / 1e6:.2f} MB/s is at most the link's {rate / 1e6:.2f} MB/s", 0 < eff <= 1.1 * rate)
    base = n.get("baseline_bytes_per_s") or 0
    check(f"baseline {base / 1e6:.1f} MB/s measured on the full link, above the limit", base > 2 * rate)
    check("the summary names the hosts", "node0, node1" in comm["summary"])
check("no straggler", "straggler" not in verdicts)
check("no descheduled rank", "descheduled" not in verdicts)
check("not input-bound", "input_bound" not in verdicts)
sys.exit(1 if failed else 0)
PY
  ;;
restart-leave-out)
  # In-job restart that leaves a host out (sluice supervise, supervisor/supervisor.h): the 2 x 2
  # job supervised with --hosts node0:2,node1:2; model rank 3 (node1) is killed with SIGKILL from
  # outside after step 4. A rank killed by a signal looks like its node's fault, and node0 alone
  # still holds one model rank (--min-model-ranks 1): the next round runs on node0 only, an elastic
  # resume from 2 model ranks to 1, and finishes by itself.
  netns_run 0 timeout -k 5 300 "$sluice" supervise --launcher mpirun --hosts node0:2,node1:2 --launcher-arg=--bind-to \
    --launcher-arg=none --max-restarts 2 --run-dir "$work/run" -- train --cache "$work/cache" \
    --set train.epochs=1 --set train.batch_size=2 --set train.n_buckets=1 --set train.checkpoint_every=2 \
    --set train.log_every=1 --set train.validation_every=0 --set debug.log_samples=true --set runtime.timeout_s=10 \
    >"$work/train.out" 2>&1 &
  mpirun_pid=$!
  wait_line "$work/train.out" "step 4/" 120 || { fail "no step 4"; tail -n 30 "$work/train.out"; exit 1; }
  victim=""
  for p in /proc/[0-9]*; do
    tr '\0' '\n' 2>/dev/null <"$p/environ" | grep -qx OMPI_COMM_WORLD_RANK=3 || continue
    tr '\0' ' ' 2>/dev/null <"$p/cmdline" | grep -q -- "$work/run" && victim=${p#/proc/} && break
  done
  [ -n "$victim" ] || { fail "rank 3's process not found"; exit 1; }
  kill -KILL "$victim"
  killed_at=$(now)
  wait "$mpirun_pid"
  check "exit code of the supervised run" "$?" 0
  mpirun_pid=""
  echo "the supervised run ended $(seconds_since "$killed_at") s after the kill"
  check_grep "the supervisor names the killed rank and its host" "restart 1 of 2: rank 3 \(host node1\) was killed by signal 9" "$work/train.out"
  check_grep "the supervisor leaves node1 out" "leaving host node1 out of the next round" "$work/train.out"
  check_grep "the second round runs on node0 only" "round 2: mpirun --host node0:2 -np 2" "$work/train.out"
  check_grep "an elastic resume on fewer model ranks" "elastic resume: the checkpoint's plan had 2 model rank\(s\), this run has 1" "$work/train.out"
  check "restarts.json left out" "$(json "$work/run/restarts.json" "['left_out'][0]['host']")" node1
  check "restarts.json outcome" "$(json "$work/run/restarts.json" "['outcome']")" finished
  check "round 2 ranks" "$(json "$work/run/restarts.json" "['rounds'][1]['ranks']")" 2
  check "round 2 model ranks" "$(json "$work/run/restarts.json" "['rounds'][1]['model_ranks']")" 1
  # Every sample of the epoch trained once: in a rank's file a step at or below one seen starts a
  # new round (the old round's lines from there on were lost with it); rank 3 trained in round 1
  # only, so its lines past the checkpoint round 2 resumed from were lost. Each file's first field
  # is the batch's global step counted from 0; the checkpoint of step S holds steps 0..S-1.
  /usr/bin/python3 - "$work/run" <<'PY' || fail "samples of the epoch not trained exactly once"
import collections, json, os, sys
run = sys.argv[1]
resumed = json.load(open(os.path.join(run, "restarts.json")))["restarts"][0]["resumed_from_step"]
times = collections.Counter()
for name in os.listdir(os.path.join(run, "samples")):
    kept = []
    for line in open(os.path.join(run, "samples", name)):
        g, epoch, step, indices = line.split()
        while kept and kept[-1][0] >= int(g):
            kept.pop()
        kept.append((int(g), indices))
    if name == "rank-3.tsv":  # the log's first field counts from 0: steps 0..resumed-1 were checkpointed
        kept = [k for k in kept if k[0] < resumed]
    for g, indices in kept:
        times.update(int(i) for i in indices.split(","))
twice = [i for i, n in times.items() if n > 1]
print(f"samples trained: {len(times)}, twice: {len(twice)}")
sys.exit(1 if twice or len(times) < 100 else 0)
PY
  ;;
*)
  echo "usage: $0 two-nodes|link-cut|link-saturated|restart-leave-out SLUICE_BINARY SAMPLE_CORPUS" >&2
  exit 2
  ;;
esac

echo "== netns $mode: $failures failure(s)"
[ "$failures" -eq 0 ]
