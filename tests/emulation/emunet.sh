#!/bin/bash
# emunet.sh: emulate several nodes on one machine with network namespaces joined by veth links.
#
# Layout of one emulated network (<id> is "st<owner pid>", so concurrent runs never collide):
#   <id>n0 .. <id>n<K-1>   one namespace per node; interface $EMUNET_IF (default emu0) with
#                          10.77.0.<k+1>/24, plus lo; commands run there get UTS hostname node<k>
#   <id>sw                 the switch: a bridge br0 and one port p<k> per node
# Every veth end lives inside a namespace of ours, so deleting the namespaces removes every link;
# nothing is ever added to the root namespace. With a rate, tc tbf shapes both directions of each
# link (node egress on $EMUNET_IF, switch egress on p<k>). /dev/shm and the PID namespace stay
# shared, as they are on this machine; node identity comes from the UTS hostname.
#
# Ownership: <id> names its owner process; a state file records the owner's pid and start time,
# so `cleanup-stale` removes what dead owners left (a trap cannot catch SIGKILL).
#
# CLI (the default owner is the calling shell, so up/run/down from one shell agree; EMUNET_ID
# overrides):
#   emunet.sh up K [--rate 1gbit] [--owner PID]   create, print the names
#   emunet.sh run <node> cmd...                   <node>: k, node<k> or <id>n<k>
#   emunet.sh bytes <node> [rx|tx]                byte counter of the node's link
#   emunet.sh down [ID]                           remove one network (processes in it included)
#   emunet.sh cleanup-stale                       remove networks whose owner is dead
#   emunet.sh list                                networks, owners, alive or stale
# Library: `source emunet.sh` defines emunet_up, emunet_run, emunet_ifbytes, emunet_down,
# emunet_cleanup_stale ...; the network belongs to $$ (the sourcing script) unless EMUNET_ID is set.

EMUNET_IF=${EMUNET_IF:-emu0}
EMUNET_SUBNET=${EMUNET_SUBNET:-10.77.0}
EMUNET_STATE_DIR=${EMUNET_STATE_DIR:-/run/strata-emunet}

emunet_log() { echo "emunet: $*" >&2; }

# Why this machine cannot run emulated nodes (empty output: it can). Callers print it and SKIP.
emunet_unavailable()
{
    local probe="stprobe$$"

    if [ "$(id -u)" != 0 ]; then echo "not root"; return 0; fi
    if ! command -v ip >/dev/null 2>&1; then echo "ip (iproute2) not installed"; return 0; fi
    if ! command -v unshare >/dev/null 2>&1; then echo "unshare not installed"; return 0; fi
    if ! ip netns add "$probe" 2>/dev/null; then
        echo "ip netns add failed (no CAP_SYS_ADMIN, or no network namespaces)"; return 0
    fi
    if ! ip netns exec "$probe" unshare --uts true 2>/dev/null; then
        ip netns del "$probe" 2>/dev/null
        echo "ip netns exec / unshare --uts does not work here"; return 0
    fi
    if ! ip -n "$probe" link add "${probe}a" type veth peer name "${probe}b" 2>/dev/null; then
        ip netns del "$probe" 2>/dev/null
        echo "cannot create veth links"; return 0
    fi
    ip netns del "$probe" 2>/dev/null
    return 0
}

# Start time of a process (field 22 of /proc/pid/stat), empty when it is gone.
emunet_starttime()
{
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
    stat=${stat##*) }   # the command name may hold spaces and parentheses
    set -- $stat
    echo "${20}"
}

# Parent pid of a process, empty when it is gone.
emunet_ppid()
{
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
    stat=${stat##*) }
    set -- $stat
    echo "$2"
}

# Rate in tc syntax (500mbit, 1gbit, 10mbps, 100kbit) to bits per second.
emunet_rate_bps()
{
    local r=${1,,} num unit
    num=${r%%[a-z]*}
    unit=${r#"$num"}
    case $unit in
        ""|bit)  echo "$num" | awk '{printf "%d\n", $1}' ;;
        kbit)    echo "$num" | awk '{printf "%d\n", $1 * 1e3}' ;;
        mbit)    echo "$num" | awk '{printf "%d\n", $1 * 1e6}' ;;
        gbit)    echo "$num" | awk '{printf "%d\n", $1 * 1e9}' ;;
        bps)     echo "$num" | awk '{printf "%d\n", $1 * 8}' ;;
        kbps)    echo "$num" | awk '{printf "%d\n", $1 * 8e3}' ;;
        mbps)    echo "$num" | awk '{printf "%d\n", $1 * 8e6}' ;;
        gbps)    echo "$num" | awk '{printf "%d\n", $1 * 8e9}' ;;
        *) return 1 ;;
    esac
}

# Network id of this shell: EMUNET_ID, else st<owner>.
emunet_id() { echo "${EMUNET_ID:-st${EMUNET_OWNER:-$$}}"; }

# Node argument (k, node<k>, <id>n<k>) to the namespace name.
emunet_ns()
{
    local id node=$1
    id=$(emunet_id)
    case $node in
        node[0-9]*)       echo "${id}n${node#node}" ;;
        st[0-9]*n[0-9]*)  echo "$node" ;;
        [0-9]*)           echo "${id}n${node}" ;;
        *) emunet_log "bad node '$node' (k, node<k> or <id>n<k>)"; return 1 ;;
    esac
}

# Node index of a namespace name or node argument.
emunet_index()
{
    local ns
    ns=$(emunet_ns "$1") || return 1
    echo "${ns##*n}"
}

# IP address of node k.
emunet_ip() { local k; k=$(emunet_index "$1") || return 1; echo "${EMUNET_SUBNET}.$((k + 1))"; }

# Number of nodes of a network (from its state file).
emunet_nodes()
{
    local id=${1:-$(emunet_id)}
    sed -n 's/^nodes=//p' "$EMUNET_STATE_DIR/$id" 2>/dev/null
}

# Processes inside a namespace (ip netns pids, which works on namespaces without processes too).
emunet_ns_pids() { ip netns pids "$1" 2>/dev/null; }

# /dev/shm bookkeeping for runs whose processes may die before unlinking their segments.
# emunet_shm_snapshot FILE records what exists; emunet_shm_cleanup FILE removes entries that are
# new since, that no live process has open or mapped (so a concurrent run's live segments stay),
# and whose names look like ours (strata, UCX, Open MPI's vader/sm): nothing else is touched.
EMUNET_SHM_PATTERN=${EMUNET_SHM_PATTERN:-'strata|^st[._-]|ucx|vader|^sm_segment|^psm|^ompi'}

emunet_shm_snapshot() { ls -A /dev/shm 2>/dev/null | sort >"$1"; }

emunet_shm_in_use()
{
    find /proc/[0-9]*/fd /proc/[0-9]*/map_files -lname '/dev/shm/*' -printf '%l\n' 2>/dev/null |
        sed -e 's|^/dev/shm/||' -e 's/ (deleted)$//' | sort -u
}

emunet_shm_cleanup()
{
    local snap=$1 name new inuse
    [ -f "$snap" ] || return 0
    new=$(ls -A /dev/shm 2>/dev/null | sort | comm -13 "$snap" - | grep -E "$EMUNET_SHM_PATTERN")
    [ -n "$new" ] || return 0
    inuse=$(emunet_shm_in_use)
    for name in $new; do
        if ! printf '%s\n' "$inuse" | grep -qxF -- "$name"; then
            emunet_log "removing leftover /dev/shm/$name"
            rm -f -- "/dev/shm/$name"
        fi
    done
}

# The pids given, less this shell and its ancestors (down may be called from inside a node).
emunet_not_me()
{
    local p q skip=" " pid
    p=${BASHPID:-$$}
    while [ -n "$p" ] && [ "$p" -gt 1 ]; do
        skip="$skip$p "
        q=$(emunet_ppid "$p")
        [ "$q" = "$p" ] && break
        p=$q
    done
    for pid in "$@"; do
        case $skip in *" $pid "*) ;; *) echo "$pid" ;; esac
    done
}

# Remove one network: kill its processes, remove /dev/shm files they had open, delete namespaces.
emunet_down()
{
    local id=${1:-$(emunet_id)} ns nss pid pids="" shm="" f round
    nss=$(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${id}(n[0-9]+|sw)\$")
    for ns in $nss; do pids="$pids $(emunet_ns_pids "$ns")"; done
    pids=$(emunet_not_me $pids)
    for pid in $pids; do
        shm="$shm $(find /proc/"$pid"/fd /proc/"$pid"/map_files -lname '/dev/shm/*' \
                        -printf '%l\n' 2>/dev/null | sed 's/ (deleted)$//')"
    done
    # TERM first so ranks can unlink their segments, then KILL whatever is left.
    [ -n "${pids// /}" ] && kill -TERM $pids 2>/dev/null
    for round in 1 2 3 4 5 6 7 8 9 10; do
        # shellcheck disable=SC2046
        pids=$(emunet_not_me $(for ns in $nss; do emunet_ns_pids "$ns"; done))
        [ -z "$pids" ] && break
        [ "$round" -ge 5 ] && kill -KILL $pids 2>/dev/null
        sleep 0.2
    done
    for f in $(printf '%s\n' $shm | sort -u); do rm -f -- "$f"; done
    for ns in $nss; do
        ip netns del "$ns" 2>/dev/null || emunet_log "could not delete namespace $ns"
    done
    rm -f "$EMUNET_STATE_DIR/$id"
    rmdir "$EMUNET_STATE_DIR" 2>/dev/null
    return 0
}

# Is the owner of network <id> dead (or a different process that reused its pid)?
emunet_is_stale()
{
    local id=$1 pid start now
    if [ -f "$EMUNET_STATE_DIR/$id" ]; then
        pid=$(sed -n 's/^owner=//p' "$EMUNET_STATE_DIR/$id")
        start=$(sed -n 's/^owner_start=//p' "$EMUNET_STATE_DIR/$id")
    else
        pid=${id#st}   # died before the state file was written, or not ours at all
        start=""
    fi
    now=$(emunet_starttime "$pid")
    [ -z "$now" ] && return 0
    [ -n "$start" ] && [ "$start" != "$now" ] && return 0
    return 1
}

# Every network id present (namespaces or state files).
emunet_list_ids()
{
    local f
    {
        ip netns list 2>/dev/null | awk '{print $1}' | sed -n -E 's/^(st[0-9]+)(n[0-9]+|sw)$/\1/p'
        for f in "$EMUNET_STATE_DIR"/st*; do
            [ -f "$f" ] && echo "${f##*/}"
        done | grep -E '^st[0-9]+$'
    } | sort -u
}

emunet_cleanup_stale()
{
    local id n=0
    for id in $(emunet_list_ids); do
        if emunet_is_stale "$id"; then
            emunet_log "removing stale network $id"
            emunet_down "$id"
            n=$((n + 1))
        fi
    done
    # Temporary folders of runs killed with SIGKILL (run_collbench.sh, test_*.sh): strata-emu.<pid>.*
    local d pid
    for d in "${TMPDIR:-/tmp}"/strata-emu.*; do
        [ -d "$d" ] || continue
        pid=${d##*/strata-emu.}
        pid=${pid%%.*}
        case $pid in ''|*[!0-9]*) continue ;; esac
        [ -z "$(emunet_starttime "$pid")" ] && rm -rf -- "$d"
    done
    emunet_log "$n stale network(s) removed"
}

# emunet_up K [rate]: create the network of $(emunet_id); prints one line per node.
emunet_up()
{
    local k n=$1 rate=${2:-} id sw ns bps burst owner
    id=$(emunet_id)
    owner=${EMUNET_OWNER:-$$}
    sw="${id}sw"
    case $n in ''|*[!0-9]*) emunet_log "node count must be a number"; return 1 ;; esac
    if [ "$n" -lt 1 ] || [ "$n" -gt 250 ]; then emunet_log "1 to 250 nodes"; return 1; fi
    if [ -n "$rate" ]; then
        bps=$(emunet_rate_bps "$rate") || { emunet_log "bad rate '$rate'"; return 1; }
        # Bucket: 4 ms at the rate (above one timer tick at HZ=250), at least 64 KiB so that
        # GSO super-packets fit without being split into many.
        burst=$((bps / 8 / 250))
        [ "$burst" -lt 65536 ] && burst=65536
    fi
    if ip netns list | awk '{print $1}' | grep -qE "^${id}(n[0-9]+|sw)\$"; then
        emunet_log "network $id exists already (emunet.sh down $id)"; return 1
    fi
    # State first: whatever is created after it can be found and removed by cleanup-stale.
    mkdir -p "$EMUNET_STATE_DIR"
    printf 'owner=%s\nowner_start=%s\nnodes=%s\nrate=%s\nif=%s\n' \
        "$owner" "$(emunet_starttime "$owner")" "$n" "$rate" "$EMUNET_IF" \
        >"$EMUNET_STATE_DIR/$id"
    {
        ip netns add "$sw" &&
        ip -n "$sw" link set lo up &&
        ip netns exec "$sw" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 \
            net.ipv6.conf.default.disable_ipv6=1 &&
        ip -n "$sw" link add br0 type bridge &&
        ip -n "$sw" link set br0 up
    } || { emunet_log "cannot create the switch $sw"; emunet_down "$id"; return 1; }
    for ((k = 0; k < n; k++)); do
        ns="${id}n${k}"
        {
            ip netns add "$ns" &&
            ip -n "$ns" link set lo up &&
            # No IPv6: its router solicitations and DAD would only add noise to the counters.
            ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 \
                net.ipv6.conf.default.disable_ipv6=1 &&
            # Both ends are born in their namespaces: nothing touches the root namespace.
            ip -n "$ns" link add "$EMUNET_IF" type veth peer name "p$k" netns "$sw" &&
            ip -n "$sw" link set "p$k" master br0 &&
            ip -n "$sw" link set "p$k" up &&
            ip -n "$ns" addr add "${EMUNET_SUBNET}.$((k + 1))/24" dev "$EMUNET_IF" &&
            ip -n "$ns" link set "$EMUNET_IF" up
        } || { emunet_log "cannot create node $ns"; emunet_down "$id"; return 1; }
        if [ -n "$rate" ]; then
            {
                ip netns exec "$ns" tc qdisc add dev "$EMUNET_IF" root tbf rate "$rate" \
                    burst "$burst" latency 20ms &&
                ip netns exec "$sw" tc qdisc add dev "p$k" root tbf rate "$rate" \
                    burst "$burst" latency 20ms
            } || { emunet_log "tc tbf failed on $ns"; emunet_down "$id"; return 1; }
        fi
        echo "node$k $ns $EMUNET_IF ${EMUNET_SUBNET}.$((k + 1))${rate:+ rate $rate}"
    done
    echo "switch $sw br0"
}

# emunet_run <node> cmd...: run cmd in the node's namespace with UTS hostname node<k>.
emunet_run()
{
    local ns k
    ns=$(emunet_ns "$1") || return 1
    k=${ns##*n}
    shift
    [ $# -gt 0 ] || { emunet_log "run: no command"; return 1; }
    ip netns exec "$ns" unshare --uts sh -c 'hostname "$0" && exec "$@"' "node$k" "$@"
}

# emunet_ifbytes <node> rx|tx [ifname]: byte counter of the node's link interface.
emunet_ifbytes()
{
    local ns dir=${2:-rx} ifn=${3:-$EMUNET_IF}
    ns=$(emunet_ns "$1") || return 1
    case $dir in rx|tx) ;; *) emunet_log "bytes: rx or tx"; return 1 ;; esac
    ip netns exec "$ns" cat "/sys/class/net/$ifn/statistics/${dir}_bytes"
}

emunet_usage()
{
    sed -n '/^# CLI/,/^# Library/p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
}

emunet_main()
{
    local cmd=${1:-}
    # The CLI's network belongs to the calling shell unless told otherwise.
    EMUNET_OWNER=${EMUNET_OWNER:-$PPID}
    [ $# -gt 0 ] && shift
    case $cmd in
        up)
            local n="" rate=""
            while [ $# -gt 0 ]; do
                case $1 in
                    --rate) rate=$2; shift 2 ;;
                    --rate=*) rate=${1#--rate=}; shift ;;
                    --owner) EMUNET_OWNER=$2; shift 2 ;;
                    *) n=$1; shift ;;
                esac
            done
            [ -n "$n" ] || { emunet_usage; return 2; }
            local why
            why=$(emunet_unavailable)
            [ -z "$why" ] || { emunet_log "$why"; return 77; }
            emunet_up "$n" "$rate"
            ;;
        run)   [ $# -ge 2 ] || { emunet_usage; return 2; }; emunet_run "$@" ;;
        bytes) [ $# -ge 1 ] || { emunet_usage; return 2; }; emunet_ifbytes "$@" ;;
        ip)    emunet_ip "$@" ;;
        down)  emunet_down "$@" ;;
        cleanup-stale|--cleanup-stale) emunet_cleanup_stale ;;
        list)
            local id
            for id in $(emunet_list_ids); do
                if emunet_is_stale "$id"; then echo "$id stale"; else echo "$id alive"; fi
            done
            ;;
        *) emunet_usage; return 2 ;;
    esac
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    emunet_main "$@"
    exit $?
fi
