# shellcheck shell=bash
# A real single-node Slurm on localhost for tests: munged, slurmctld and slurmd from Debian, with
# every file (config, state, logs, pid files, the munge socket) in one directory the caller owns.
# Source this file, then:
#   local_slurm_start DIR    writes DIR/slurm.conf, starts the three daemons, waits until the node
#                            is idle (deadline 60 s); exports SLURM_CONF so sinfo/srun/sbatch use it
#   local_slurm_stop         stops the daemons by their pid files, waits for them (deadline 15 s,
#                            then SIGKILL); safe to call twice and from an EXIT trap
# Needs root (the daemons run as root; munged runs as the munge user).
# Ports are not Slurm's defaults (6817/6818) so that a Slurm already on the machine is not touched.

LOCAL_SLURM_DIR=""
LOCAL_SLURM_CTLD_PORT=${LOCAL_SLURM_CTLD_PORT:-16817}
LOCAL_SLURM_D_PORT=${LOCAL_SLURM_D_PORT:-16818}

local_slurm_start() {
  local dir=$1 node cpus mem_mb started
  LOCAL_SLURM_DIR=$dir
  mkdir -p "$dir/state" "$dir/spool" "$dir/munge"
  chown munge:munge "$dir/munge"
  chmod 0755 "$dir"
  node=$(hostname -s)
  # More CPUs than the machine has (config_overrides: slurmd takes the config's word), so that
  # a 3-rank job fits on a 2-core CI machine; ranks then share cores, as under mpirun --oversubscribe.
  cpus=$(( $(nproc) < 8 ? 8 : $(nproc) ))
  mem_mb=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 * 8 / 10 ))
  cat >"$dir/slurm.conf" <<EOF
ClusterName=sluice-ci
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$LOCAL_SLURM_CTLD_PORT
SlurmdPort=$LOCAL_SLURM_D_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket,cred_expire=10
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=pmix
ReturnToService=2
MailProg=/bin/true
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
SchedulerParameters=sched_interval=1
MessageTimeout=20
# SIGTERM to SIGKILL on scancel/requeue: room for a step plus a checkpoint (Slurm's default)
KillWait=30
MinJobAge=300
SlurmdParameters=config_overrides
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
EOF
  export SLURM_CONF=$dir/slurm.conf
  started=$(date +%s.%N)
  runuser -u munge -- /usr/sbin/munged --socket="$dir/munge/munge.socket" \
    --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" \
    --seed-file="$dir/munge/munged.seed" || { echo "local_slurm: munged did not start" >&2; return 1; }
  slurmctld -f "$SLURM_CONF" || { echo "local_slurm: slurmctld did not start" >&2; return 1; }
  slurmd -f "$SLURM_CONF" || { echo "local_slurm: slurmd did not start" >&2; return 1; }
  local deadline=$(( $(date +%s) + 60 )) state=""
  while [ "$(date +%s)" -lt "$deadline" ]; do
    state=$(timeout 5 sinfo -h -o %T 2>/dev/null | head -1)
    [ "$state" = idle ] && break
    sleep 0.2
  done
  if [ "$state" != idle ]; then
    echo "local_slurm: node not idle after 60 s (state '$state'); logs:" >&2
    tail -n 20 "$dir/slurmctld.log" "$dir/slurmd.log" >&2
    return 1
  fi
  LOCAL_SLURM_START_SECONDS=$(awk -v a="$started" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  echo "local_slurm: up in ${LOCAL_SLURM_START_SECONDS} s (node $node, $cpus CPUs, config $SLURM_CONF)"
}

# Stops one daemon by its pid file: SIGTERM, wait up to 15 s, then SIGKILL.
local_slurm_stop_pid_file() {
  local pid_file=$1 pid
  [ -s "$pid_file" ] || return 0
  pid=$(cat "$pid_file")
  kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 150); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  echo "local_slurm: pid $pid ($pid_file) ignored SIGTERM for 15 s; SIGKILL" >&2
  kill -KILL "$pid" 2>/dev/null
}

local_slurm_stop() {
  [ -n "$LOCAL_SLURM_DIR" ] || return 0
  local dir=$LOCAL_SLURM_DIR
  # Jobs first, with SIGKILL (a test that stops early wants no checkpoint and no requeue), while
  # slurmd can still report them gone.
  if [ -n "$(timeout 10 squeue -h 2>/dev/null)" ]; then
    timeout 10 scancel --quiet --full --signal=KILL --user=root 2>/dev/null || true
    timeout 10 scancel --quiet --user=root 2>/dev/null || true
    local deadline=$(( $(date +%s) + 20 ))
    while [ -n "$(timeout 10 squeue -h 2>/dev/null)" ] && [ "$(date +%s)" -lt "$deadline" ]; do sleep 0.5; done
  fi
  local_slurm_stop_pid_file "$dir/slurmd.pid"
  local_slurm_stop_pid_file "$dir/slurmctld.pid"
  local_slurm_stop_pid_file "$dir/munge/munged.pid"
  # Whatever this cluster started and outlived its daemons (slurmstepd, job scripts, tasks) has
  # this cluster's SLURM_CONF in its environment (the daemons were started with it exported):
  # stop those processes by pid, except this shell and its ancestors.
  local keep=" " pid=$$ p leftover=""
  while [ "$pid" -gt 1 ]; do keep+="$pid "; pid=$(awk '{print $4}' "/proc/$pid/stat" 2>/dev/null || echo 1); done
  for p in /proc/[0-9]*; do
    pid=${p#/proc/}
    [ "$pid" = "$BASHPID" ] && continue
    case $keep in *" $pid "*) continue ;; esac
    tr '\0' '\n' 2>/dev/null <"$p/environ" | grep -qxF "SLURM_CONF=$dir/slurm.conf" && leftover+=" $pid"
  done
  if [ -n "$leftover" ]; then
    echo "local_slurm: stopping processes left by the jobs:$leftover" >&2
    kill -KILL $leftover 2>/dev/null
  fi
  LOCAL_SLURM_DIR=""
}
