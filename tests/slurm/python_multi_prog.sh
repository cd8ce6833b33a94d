#!/usr/bin/env bash
# Python model ranks under a real single-node Slurm (local_slurm.sh): one `srun --mpi=pmix
# --multi-prog` step of 3 tasks, task 0 the sluice data rank and tasks 1-2 the example PyTorch
# script (examples/python_tts/train.py), as docs/python.md shows it. Checks: the step exits 0,
# the role plan shows two Python model ranks fed by rank 0, each Python rank trained every step
# and its loss fell, and report.json names the Python ranks.
#
#   tests/slurm/python_multi_prog.sh SLUICE_BINARY PYTHON PYTHONPATH_DIR SAMPLE_CORPUS REPO_ROOT
# PYTHON: /usr/bin/python3 (with the extension module in PYTHONPATH_DIR) or sluice-python.
# Exit 0 passed, 1 failed, 77 skipped (not root, or Slurm/munge not installed).
set -uo pipefail

sluice=$1 python=$2 python_dir=$3 corpus=$4 repo=$5
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
unset "${!SLURM_@}"  # only the Slurm this test starts
export PATH="$PATH:/usr/sbin:/sbin"

skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "needs root to run slurmctld/slurmd/munged"
for tool in munged slurmctld slurmd srun scontrol sinfo; do
  command -v "$tool" >/dev/null || skip "$tool not installed (scripts/install-deps.sh installs slurmctld slurmd slurm-client munge)"
done
[ -f /etc/munge/munge.key ] || skip "/etc/munge/munge.key missing (the munge package makes it)"
[ -f "$corpus/metadata.csv" ] || { echo "FAIL: no sample corpus at $corpus"; exit 1; }

# Ports of their own: slurm_e2e may run beside this test in another build.
export LOCAL_SLURM_CTLD_PORT=${LOCAL_SLURM_CTLD_PORT:-16827} LOCAL_SLURM_D_PORT=${LOCAL_SLURM_D_PORT:-16828}
# shellcheck source=tests/slurm/local_slurm.sh
source "$here/local_slurm.sh"
work=$(mktemp -d /tmp/sluice-slurm-python.XXXXXX)
chmod 0755 "$work"
failures=0
cleanup() {
  local_slurm_stop
  local leftover
  leftover=$(pgrep -f -- "$work" || true)
  [ -n "$leftover" ] && kill -KILL $leftover 2>/dev/null
  if [ "$failures" -eq 0 ] && [ -z "${KEEP_WORK:-}" ]; then rm -rf "$work"; else echo "logs kept in $work"; fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
check() { if [ "$2" == "$3" ]; then echo "ok: $1 = $2"; else fail "$1: got '$2', expected '$3'"; fi; }

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
"$sluice" prep --corpus "$corpus" --out "$work/cache" --set cache.shard_size=32 >"$work/prep.out" 2>&1 ||
  { fail "sluice prep"; tail -n 20 "$work/prep.out"; exit 1; }
local_slurm_start "$work/slurm" || { fail "Slurm did not start"; exit 1; }

steps=12
cat >"$work/train.conf" <<CONF
0    $sluice train --cache $work/cache --run-dir $work/run --steps $steps --set train.batch_size=4 --set train.n_buckets=2 --set train.validation_every=0 --set train.checkpoint_every=0 --set train.log_every=1000 --set runtime.status_every_s=0
1-2  $python $repo/examples/python_tts/train.py --out $work/example-{rank}.json
CONF
echo "== srun --mpi=pmix -n 3 --multi-prog: 1 sluice data rank + 2 Python ranks"
PYTHONPATH=$python_dir timeout -k 5 400 srun --mpi=pmix --kill-on-bad-exit=1 -n 3 --multi-prog "$work/train.conf" \
  >"$work/train.out" 2>&1
check "srun exit code" "$?" 0
check "Python model ranks in the role plan" "$(grep -c 'model (python) fed by 0' "$work/train.out")" 2
for rank in 0 1; do
  record=$work/example-$rank.json
  check "steps trained by Python model rank $rank" \
    "$(/usr/bin/python3 -c "import json,sys; print(len(json.load(open(sys.argv[1]))['losses']))" "$record" 2>/dev/null)" "$steps"
  check "loss fell on Python model rank $rank" \
    "$(/usr/bin/python3 -c "import json,sys; l=json.load(open(sys.argv[1]))['losses']; print(sum(l[-3:]) < sum(l[:3]))" "$record" 2>/dev/null)" True
done
check "report.json's Python model ranks" \
  "$(/usr/bin/python3 -c "import json,sys; print(sum(m['name'].endswith('model (python)') for m in json.load(open(sys.argv[1]))['model_ranks']))" "$work/run/report.json" 2>/dev/null)" 2
if [ "$failures" -ne 0 ]; then tail -n 40 "$work/train.out"; exit 1; fi
echo "PASS"
