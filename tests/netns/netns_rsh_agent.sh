#!/bin/bash
# mpirun's rsh agent for the namespace "hosts" of netns_hosts.sh: called like ssh,
# `agent [options] HOST COMMAND...`, it runs COMMAND (a shell command line, as ssh would) on HOST
# = nodeN: inside namespace ${NETNS_PREFIX}nN with host name nodeN and the nodes' /etc/hosts.
set -u
while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do shift; done   # ssh options, if any
host=$1
shift
i=${host#node}
exec ip netns exec "${NETNS_PREFIX:?}n$i" unshare --uts --mount -- /bin/bash -c \
  'hostname "$1" && mount --bind "$2" /etc/hosts && eval "$3"' _ "$host" "${NETNS_HOSTS_FILE:?}" "$*"
