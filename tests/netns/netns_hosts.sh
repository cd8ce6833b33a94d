# shellcheck shell=bash
# Several "hosts" on one machine for tests: one network namespace per node with its own address
# (10.77.0.N/24 on a veth pair) and, for every process started in it, its own host name (a UTS
# namespace) and an /etc/hosts naming all nodes (a mount namespace). The veth pairs meet on a
# bridge inside a "switch" namespace, so the machine's own namespace gets no new interface.
# Source this file, then:
#   netns_hosts_up N DIR     nodes node0..node{N-1} as namespaces ${NETNS_PREFIX}n0..; DIR holds hosts
#   netns_run I CMD...       runs CMD on node I (namespace, host name nodeI, /etc/hosts)
#   netns_link I up|down     the link of node I at the switch (a cable pulled or plugged)
#   netns_link_rate I RATE   node I's link carries at most RATE (tc tbf, e.g. 20mbit) each way
#   netns_hosts_down         kills every process left in the namespaces (by pid), deletes them
# Needs root. mpirun across the nodes uses netns_rsh_agent.sh as its rsh agent (NETNS_PREFIX and
# NETNS_HOSTS_FILE in the environment tell it where a host is).

NETNS_PREFIX=${NETNS_PREFIX:-sl$$}
NETNS_SUBNET=10.77.0

# Namespaces left by an earlier test that was killed outright (SIGKILL runs no trap): prefix
# sl<pid> whose pid is gone. Their processes are stopped and the namespaces deleted.
netns_hosts_remove_stale() {
  local prefix
  for prefix in $(ip netns list | awk '{print $1}' | sed -n 's/^\(sl[0-9][0-9]*\)\(n[0-9]*\|sw\)$/\1/p' | sort -u); do
    kill -0 "${prefix#sl}" 2>/dev/null && continue
    echo "netns_hosts: removing namespaces left by a killed test (${prefix}*)"
    NETNS_PREFIX=$prefix netns_hosts_down
  done
}

netns_hosts_up() {
  local n=$1 dir=$2 i sw=${NETNS_PREFIX}sw
  export NETNS_PREFIX NETNS_HOSTS_FILE=$dir/hosts
  netns_hosts_remove_stale
  ip netns add "$sw" || return 1
  ip -n "$sw" link add br0 type bridge || return 1
  ip -n "$sw" link set br0 up
  printf '127.0.0.1 localhost\n' >"$NETNS_HOSTS_FILE"
  for ((i = 0; i < n; i++)); do
    ip netns add "${NETNS_PREFIX}n$i" || return 1
    ip -n "$sw" link add "s$i" type veth peer name eth0 netns "${NETNS_PREFIX}n$i" || return 1
    ip -n "$sw" link set "s$i" master br0 up
    ip -n "${NETNS_PREFIX}n$i" addr add "$NETNS_SUBNET.$((i + 1))/24" dev eth0
    ip -n "${NETNS_PREFIX}n$i" link set eth0 up
    ip -n "${NETNS_PREFIX}n$i" link set lo up
    printf '%s node%d\n' "$NETNS_SUBNET.$((i + 1))" "$i" >>"$NETNS_HOSTS_FILE"
  done
  # The bridge has STP off, so a port forwards as soon as it is up: no wait for learning states.
  [ "$(ip -n "$sw" -o link show up | grep -c ' s[0-9]*@')" -eq "$n" ] || { echo "netns_hosts: switch ports not up" >&2; return 1; }
}

netns_run() {
  local i=$1
  shift
  ip netns exec "${NETNS_PREFIX}n$i" unshare --uts --mount -- /bin/bash -c \
    'hostname "$1" && mount --bind "$2" /etc/hosts && shift 2 && exec "$@"' _ "node$i" "$NETNS_HOSTS_FILE" "$@"
}

netns_link() {
  ip -n "${NETNS_PREFIX}sw" link set "s$1" "$2"
}

netns_link_rate() {
  # A token bucket on both ends of the cable: the switch port's egress (towards node I) and the
  # node's eth0 (from it). The queue holds 100 ms at the rate; beyond it packets wait or drop, as
  # on a saturated link, and TCP backs off to the rate.
  ip netns exec "${NETNS_PREFIX}sw" tc qdisc replace dev "s$1" root tbf rate "$2" burst 64kb latency 100ms &&
    ip netns exec "${NETNS_PREFIX}n$1" tc qdisc replace dev eth0 root tbf rate "$2" burst 64kb latency 100ms
}

netns_hosts_down() {
  local ns pids
  for ns in $(ip netns list | awk '{print $1}' | grep "^${NETNS_PREFIX}\(n[0-9]*\|sw\)$"); do
    pids=$(ip netns pids "$ns" 2>/dev/null)
    if [ -n "$pids" ]; then
      echo "netns_hosts: stopping processes left in $ns: $(echo $pids)"
      kill -KILL $pids 2>/dev/null
      local deadline=$(( $(date +%s) + 10 ))
      while [ -n "$(ip netns pids "$ns" 2>/dev/null)" ] && [ "$(date +%s)" -lt "$deadline" ]; do sleep 0.1; done
    fi
    ip netns del "$ns"
  done
}
