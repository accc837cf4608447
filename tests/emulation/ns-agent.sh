#!/bin/bash
# ns-agent.sh: Open MPI launch agent (--mca plm_rsh_agent) that enters an emulated node's network
# namespace instead of ssh'ing to a host. Open MPI calls it as it would call ssh:
#     ns-agent.sh [ssh options] <host> <command words...>
# <host> is node<k> (needs EMUNET_ID in the environment, which mpirun passes on to its agent),
# or a namespace name <id>n<k>. Like sshd, the command words are joined and run by a shell, inside
# the namespace, with the node's UTS hostname (node<k>), so Open MPI's quoting works unchanged.
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=emunet.sh
. "$here/emunet.sh"

# Skip ssh-style options Open MPI may add (-x, -o X=Y, -p port ...).
while [ $# -gt 0 ]; do
    case $1 in
        -[1246AaCfGgKkMNnqsTtVXxYy]) shift ;;
        -[bcDEeFIiJLlmOoPpQRSWw]) shift 2 ;;
        -*) shift ;;
        *) break ;;
    esac
done
[ $# -ge 2 ] || { echo "ns-agent.sh: usage: ns-agent.sh <host> <command...>" >&2; exit 255; }
host=$1
shift
ns=$(emunet_ns "$host") || exit 255
if ! ip netns list | awk '{print $1}' | grep -qx "$ns"; then
    echo "ns-agent.sh: no namespace $ns for host $host (EMUNET_ID=${EMUNET_ID:-unset})" >&2
    exit 255
fi
[ -n "${NS_AGENT_LOG:-}" ] && echo "$(date +%T) $host -> $ns: $*" >>"$NS_AGENT_LOG"
exec ip netns exec "$ns" unshare --uts sh -c 'hostname "$0" && exec /bin/sh -c "$1"' \
    "node${ns##*n}" "$*"
