#!/bin/bash
# emunet.sh: emulate several nodes on one machine with network namespaces joined by veth links.
#
# Layout of one emulated network (<id> is "st<owner pid>", so concurrent runs never collide):
#   <id>n0 .. <id>n<K-1>   one namespace per node; interface $EMUNET_IF (default emu0) with
#                          10.77.0.<k+1>/24, plus lo; commands run there get UTS hostname node<k>
#   <id>sw                 the switch: a bridge br0 and one port p<k> per node
# With L links per node (`up K --links L`), link l of node k is interface emu<l> with
# 10.77.<l>.<k+1>/24, cabled to its own switch namespace <id>sw<l> (link 0 keeps <id>sw): one
# bridge, one subnet and one rate per link, so the links are independent "rails" (traffic for
# 10.77.<l>.x can only take link l). One link (the default) is exactly the layout above.
# Every veth end lives inside a namespace of ours, so deleting the namespaces removes every link;
# nothing is ever added to the root namespace. With a rate, tc tbf shapes both directions of each
# link (node egress on emu<l>, switch egress on p<k>). /dev/shm and the PID namespace stay
# shared, as they are on this machine; node identity comes from the UTS hostname.
#
# Ownership: <id> names its owner process; a state file records the owner's pid and start time,
# so `cleanup-stale` removes what dead owners left (a trap cannot catch SIGKILL).
#
# CLI (the default owner is the calling shell, so up/run/down from one shell agree; EMUNET_ID
# overrides):
#   emunet.sh up K [--links L] [--rate R | --rate R0,R1,..] [--mtu M] [--owner PID]
#                                                 create, print the names; one rate for every
#                                                 link or one per link (none: unshaped); M: the
#                                                 links' MTU (default 1500; 9000: jumbo frames)
#   emunet.sh run <node> cmd...                   <node>: k, node<k> or <id>n<k>
#   emunet.sh bytes <node> [rx|tx] [if]           byte counter of one link of the node
#                                                 (if: emu<l> or the link number l; default 0)
#   emunet.sh ip <node> [link]                    address of the node on link l (default 0)
#   emunet.sh link <node> <l> up|down|cut         set link l of the node up (waits until the
#                                                 network is up again), down, or cut (carrier
#                                                 on, its switch port out of the bridge)
#   emunet.sh wait [ID]                           wait until every link is up (EMUNET_UP_TIMEOUT)
#   emunet.sh down [ID]                           remove one network (processes in it included)
#   emunet.sh cleanup-stale                       remove networks whose owner is dead
#   emunet.sh list                                networks, owners, alive or stale
# Library: `source emunet.sh` defines emunet_up, emunet_run, emunet_ifbytes, emunet_down,
# emunet_cleanup_stale ...; the network belongs to $$ (the sourcing script) unless EMUNET_ID is set.
# emunet_job_start and emunet_job_wait run a job of ranks on a network of its own (run_collbench.sh,
# examples/run_ddp_emu.sh).

EMUNET_IF=${EMUNET_IF:-emu0}
EMUNET_SUBNET=${EMUNET_SUBNET:-10.77.0}
EMUNET_STATE_DIR=${EMUNET_STATE_DIR:-/run/strata-emunet}

emunet_log() { echo "emunet: $*" >&2; }

# A random TCP port for a bootstrap root (STRATA_COMM_ID), below the kernel's ephemeral range
# (ip_local_port_range): a port inside it may be handed to an outgoing connection on the same
# address, and the root's bind then fails with EADDRINUSE.
emunet_root_port()
{
    local lo

    lo=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null)
    [ "${lo:-0}" -gt 11024 ] 2>/dev/null || lo=32768
    echo $((10000 + RANDOM % (lo - 10000)))
}

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

# Link l (0, 1, ...) of a node: its interface, subnet (first three octets) and switch namespace.
# Link 0 is $EMUNET_IF, $EMUNET_SUBNET and <id>sw, as with one link; link l counts on from there:
# emu<l>, 10.77.<l>, <id>sw<l>.
emunet_ifname()
{
    local l=${1:-0}
    if [ "$l" = 0 ]; then echo "$EMUNET_IF"
    elif [ "${EMUNET_IF%0}" != "$EMUNET_IF" ]; then echo "${EMUNET_IF%0}$l"
    else echo "$EMUNET_IF$l"
    fi
}

emunet_subnet()
{
    local l=${1:-0}
    echo "${EMUNET_SUBNET%.*}.$(( ${EMUNET_SUBNET##*.} + l ))"
}

emunet_switch_ns()
{
    local l=${1:-0} id=${2:-$(emunet_id)}
    if [ "$l" = 0 ]; then echo "${id}sw"; else echo "${id}sw$l"; fi
}

# IP address of node k on link l (default 0).
emunet_ip()
{
    local k l=${2:-0}
    k=$(emunet_index "$1") || return 1
    echo "$(emunet_subnet "$l").$((k + 1))"
}

# Number of links per node of a network (from its state file; 1 for networks without the field).
emunet_links()
{
    local id=${1:-$(emunet_id)} l
    l=$(sed -n 's/^links=//p' "$EMUNET_STATE_DIR/$id" 2>/dev/null)
    echo "${l:-1}"
}

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
    nss=$(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${id}(n[0-9]+|sw[0-9]*)\$")
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
        ip netns list 2>/dev/null | awk '{print $1}' |
            sed -n -E 's/^(st[0-9]+)(n[0-9]+|sw[0-9]*)$/\1/p'
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

# emunet_link_state NS IF: "up" when interface IF of namespace NS is operationally up (operstate
# UP, carrier on: the kernel raises a veth's carrier asynchronously, later on a loaded machine),
# else what `ip -br link` says of it ("DOWN <NO-CARRIER,BROADCAST,...>", or "missing").
emunet_link_state()
{
    local line oper flags
    line=$(ip -n "$1" -br link show dev "$2" 2>/dev/null) || { echo "missing"; return 0; }
    read -r _ oper flags <<<"$line"
    if [ "$oper" = UP ] && [[ $flags != *NO-CARRIER* ]] && [[ $flags == *LOWER_UP* ]]; then
        echo up
    else
        echo "$oper $flags"
    fi
}

# emunet_wait_links [ID]: returns 0 once every link of network ID (default this shell's) is up
# in both namespaces (the node's emu<l>, the switch's p<k> and br0: emunet_link_state) and each
# node's address on each link answers one ping from node 0 (node 1 pings node 0's); 1 after
# EMUNET_UP_TIMEOUT seconds (default 30), naming on stderr every link that never came up or never
# answered. emunet_up and emunet_link_set call it: ranks must never start on a link that is not
# up yet (UCX leaves a device without carrier out of its context, and a rail on it is then
# unreachable).
emunet_wait_links()
{
    local id=${1:-$(emunet_id)} n nlinks k l ns sw ifn st from to deadline bad
    local -a pending=()
    n=$(emunet_nodes "$id") nlinks=$(emunet_links "$id")
    [ -n "$n" ] || { emunet_log "wait: no network $id"; return 1; }
    case ${EMUNET_UP_TIMEOUT:-30} in
        *[!0-9]*|0) emunet_log "EMUNET_UP_TIMEOUT '$EMUNET_UP_TIMEOUT': a positive number of seconds"
                    return 1 ;;
    esac
    deadline=$(( $(date +%s) + ${EMUNET_UP_TIMEOUT:-30} ))
    # every (namespace, interface) pair that must be up
    for ((l = 0; l < nlinks; l++)); do
        sw=$(emunet_switch_ns "$l" "$id")
        pending+=("$sw br0")
        for ((k = 0; k < n; k++)); do
            pending+=("${id}n$k $(emunet_ifname "$l")" "$sw p$k")
        done
    done
    while :; do
        local -a still=()
        for st in "${pending[@]}"; do
            [ "$(emunet_link_state ${st})" = up ] || still+=("$st")
        done
        pending=("${still[@]}")
        [ ${#pending[@]} -eq 0 ] && break
        if [ "$(date +%s)" -ge "$deadline" ]; then
            for st in "${pending[@]}"; do
                emunet_log "link ${st#* } of namespace ${st%% *} never came up within" \
                           "${EMUNET_UP_TIMEOUT:-30} s: $(emunet_link_state ${st})"
            done
            return 1
        fi
        sleep 0.1
    done
    [ "$n" -ge 2 ] || return 0
    # one ping per link and node, from node 0 (node 0's own address from node 1)
    for ((l = 0; l < nlinks; l++)); do
        ifn=$(emunet_ifname "$l")
        for ((k = 0; k < n; k++)); do
            from=0 to="$(emunet_subnet "$l").$((k + 1))"
            [ "$k" = 0 ] && from=1
            until ip netns exec "${id}n$from" ping -n -q -c 1 -W 1 -I "$ifn" "$to" \
                      >/dev/null 2>&1; do
                if [ "$(date +%s)" -ge "$deadline" ]; then
                    emunet_log "link $ifn of node$k ($to) does not answer a ping from node$from" \
                               "within ${EMUNET_UP_TIMEOUT:-30} s"
                    return 1
                fi
                sleep 0.1
            done
        done
    done
    return 0
}

# emunet_link_set NODE LINK up|down|cut [ID]: sets link LINK (0, 1, ...) of NODE up or down on
# the node's side (ip link set emu<l> up|down), or cuts it: its switch port leaves the bridge, so
# the node's interface stays up with its carrier on but nothing crosses (a dead switch port). up
# reconnects a cut port too, and waits until the whole network is up again (emunet_wait_links).
# For tests of a rail that cannot carry traffic.
emunet_link_set()
{
    local ns ifn k sw
    ns=$(emunet_ns "$1") || return 1
    k=$(emunet_index "$1") || return 1
    case $2 in
        [0-9]|[0-9][0-9]) ;;
        "${EMUNET_IF%0}"[0-9]|"${EMUNET_IF%0}"[0-9][0-9]) set -- "$1" "${2#"${EMUNET_IF%0}"}" "$3" "${4:-}" ;;
        *) emunet_log "link: '$2' is not a link (a number, or ${EMUNET_IF%0}<l>)"; return 1 ;;
    esac
    ip netns list | awk '{print $1}' | grep -qx "$ns" ||
        { emunet_log "link: no node $1 (namespace $ns)"; return 1; }
    ifn=$(emunet_ifname "$2")
    sw=$(emunet_switch_ns "$2" "${4:-$(emunet_id)}")
    case $3 in
        up)   ip -n "$ns" link set "$ifn" up && ip -n "$sw" link set "p$k" master br0 &&
              emunet_wait_links "${4:-}" ;;
        down) ip -n "$ns" link set "$ifn" down ;;
        cut)  ip -n "$sw" link set "p$k" nomaster ;;
        *)    emunet_log "link_set: up, down or cut"; return 1 ;;
    esac
}

# emunet_up K [rate] [links] [mtu]: create the network of $(emunet_id); prints one line per node and
# one per switch, and returns only once every link is up and answers (emunet_wait_links; on a
# link that never comes up it names it, removes the network and returns 1). rate: one tc rate for every link, or one per link separated by commas (empty or
# `none`: that link unshaped); links: interfaces per node (1); mtu: of every link, both veth ends
# (empty: the kernel's 1500). With 1500, TCP carries at most 1448 payload bytes per 1514 the
# shaper counts (0.956 of the rate); with 9000, 8948 per 9014 (0.993).
emunet_up()
{
    local k l n=$1 ratespec=${2:-} nlinks=${3:-1} mtu=${4:-} id sw ns owner line ifn ip bps
    local -a rates=() bursts=()
    id=$(emunet_id)
    owner=${EMUNET_OWNER:-$$}
    case $n in ''|*[!0-9]*) emunet_log "node count must be a number"; return 1 ;; esac
    if [ "$n" -lt 1 ] || [ "$n" -gt 250 ]; then emunet_log "1 to 250 nodes"; return 1; fi
    case $nlinks in ''|*[!0-9]*) emunet_log "link count must be a number"; return 1 ;; esac
    if [ "$nlinks" -lt 1 ] || [ "$nlinks" -gt 8 ]; then emunet_log "1 to 8 links"; return 1; fi
    case $mtu in ''|*[!0-9]*) [ -z "$mtu" ] || { emunet_log "MTU must be a number"; return 1; } ;; esac
    if [ -n "$mtu" ] && { [ "$mtu" -lt 576 ] || [ "$mtu" -gt 65535 ]; }; then
        emunet_log "MTU $mtu: 576 to 65535"; return 1
    fi
    if [ $(( ${EMUNET_SUBNET##*.} + nlinks - 1 )) -gt 255 ]; then
        emunet_log "subnet $EMUNET_SUBNET has no room for $nlinks links"; return 1
    fi
    # Rates: validated, every one, before anything exists.
    IFS=, read -r -a rates <<<"$ratespec"
    [ -n "$ratespec" ] && [ "${ratespec%,}" != "$ratespec" ] && rates+=("")   # trailing "R,"
    if [ ${#rates[@]} -le 1 ]; then
        for ((l = 1; l < nlinks; l++)); do rates[l]=${rates[0]:-}; done
    elif [ ${#rates[@]} -ne "$nlinks" ]; then
        emunet_log "${#rates[@]} rates for $nlinks links (give one, or one per link)"; return 1
    fi
    for ((l = 0; l < nlinks; l++)); do
        [ "${rates[l]:-}" = none ] && rates[l]=""
        [ -n "${rates[l]:-}" ] || { rates[l]=""; continue; }
        bps=$(emunet_rate_bps "${rates[l]}") && [ "$bps" -gt 0 ] ||
            { emunet_log "bad rate '${rates[l]}'"; return 1; }
        # Bucket: 4 ms at the rate (above one timer tick at HZ=250), at least 64 KiB so that
        # GSO super-packets fit without being split into many.
        bursts[l]=$((bps / 8 / 250))
        [ "${bursts[l]}" -lt 65536 ] && bursts[l]=65536
        [ -n "$mtu" ] && [ "${bursts[l]}" -lt $((4 * mtu)) ] && bursts[l]=$((4 * mtu))
    done
    if ip netns list | awk '{print $1}' | grep -qE "^${id}(n[0-9]+|sw[0-9]*)\$"; then
        emunet_log "network $id exists already (emunet.sh down $id)"; return 1
    fi
    # State first: whatever is created after it can be found and removed by cleanup-stale.
    # Written whole, then renamed: a concurrent cleanup-stale must never read it half-written
    # (an empty owner reads as a dead one). Retried: another network's `down` removes the folder
    # when it holds nothing else (rmdir), which can fall between our mkdir and our write.
    local try
    for try in 1 2 3 4 5; do
        mkdir -p "$EMUNET_STATE_DIR" 2>/dev/null &&
            printf 'owner=%s\nowner_start=%s\nnodes=%s\nrate=%s\nif=%s\nlinks=%s\nmtu=%s\n' \
                "$owner" "$(emunet_starttime "$owner")" "$n" "$ratespec" "$EMUNET_IF" "$nlinks" \
                "${mtu:-1500}" >"$EMUNET_STATE_DIR/.$id.tmp" 2>/dev/null &&
            mv -f "$EMUNET_STATE_DIR/.$id.tmp" "$EMUNET_STATE_DIR/$id" 2>/dev/null && break
        [ "$try" = 5 ] && { emunet_log "cannot write the state of network $id in $EMUNET_STATE_DIR"; return 1; }
    done
    for ((l = 0; l < nlinks; l++)); do
        sw=$(emunet_switch_ns "$l" "$id")
        {
            ip netns add "$sw" &&
            ip -n "$sw" link set lo up &&
            ip netns exec "$sw" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 \
                net.ipv6.conf.default.disable_ipv6=1 &&
            ip -n "$sw" link add br0 type bridge &&
            ip -n "$sw" link set br0 up
        } || { emunet_log "cannot create the switch $sw"; emunet_down "$id"; return 1; }
    done
    for ((k = 0; k < n; k++)); do
        ns="${id}n${k}"
        {
            ip netns add "$ns" &&
            ip -n "$ns" link set lo up &&
            # No IPv6: its router solicitations and DAD would only add noise to the counters.
            ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 \
                net.ipv6.conf.default.disable_ipv6=1
        } || { emunet_log "cannot create node $ns"; emunet_down "$id"; return 1; }
        line="node$k $ns"
        for ((l = 0; l < nlinks; l++)); do
            sw=$(emunet_switch_ns "$l" "$id")
            ifn=$(emunet_ifname "$l")
            ip="$(emunet_subnet "$l").$((k + 1))"
            {
                # Both ends are born in their namespaces: nothing touches the root namespace.
                ip -n "$ns" link add "$ifn" type veth peer name "p$k" netns "$sw" &&
                { [ -z "$mtu" ] || { ip -n "$ns" link set "$ifn" mtu "$mtu" &&
                                     ip -n "$sw" link set "p$k" mtu "$mtu"; }; } &&
                ip -n "$sw" link set "p$k" master br0 &&
                ip -n "$sw" link set "p$k" up &&
                ip -n "$ns" addr add "$ip/24" dev "$ifn" &&
                ip -n "$ns" link set "$ifn" up
            } || { emunet_log "cannot create link $ifn of node $ns"; emunet_down "$id"; return 1; }
            if [ -n "${rates[l]}" ]; then
                {
                    ip netns exec "$ns" tc qdisc add dev "$ifn" root tbf rate "${rates[l]}" \
                        burst "${bursts[l]}" latency 20ms &&
                    ip netns exec "$sw" tc qdisc add dev "p$k" root tbf rate "${rates[l]}" \
                        burst "${bursts[l]}" latency 20ms
                } || { emunet_log "tc tbf failed on $ns $ifn"; emunet_down "$id"; return 1; }
            fi
            line="$line $ifn $ip${rates[l]:+ rate ${rates[l]}}${mtu:+ mtu $mtu}"
        done
        echo "$line"
    done
    # EMUNET_FAULT_PORT_DOWN=k/l (tests only): port p<k> of link l's switch stays down, so that
    # link never comes up and the wait below must name it
    if [ -n "${EMUNET_FAULT_PORT_DOWN:-}" ]; then
        ip -n "$(emunet_switch_ns "${EMUNET_FAULT_PORT_DOWN#*/}" "$id")" link set \
            "p${EMUNET_FAULT_PORT_DOWN%/*}" down
    fi
    if ! emunet_wait_links "$id"; then
        emunet_log "network $id: a link did not come up; taking it down"
        emunet_down "$id"
        return 1
    fi
    for ((l = 0; l < nlinks; l++)); do echo "switch $(emunet_switch_ns "$l" "$id") br0"; done
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

# emunet_ifbytes <node> rx|tx [if]: byte counter of one link of the node; if: an interface name
# or a link number (default link 0, $EMUNET_IF).
emunet_ifbytes()
{
    local ns dir=${2:-rx} ifn=${3:-$EMUNET_IF}
    ns=$(emunet_ns "$1") || return 1
    case $dir in rx|tx) ;; *) emunet_log "bytes: rx or tx"; return 1 ;; esac
    case $ifn in [0-9]|[0-9][0-9]) ifn=$(emunet_ifname "$ifn") ;; esac
    ip netns exec "$ns" cat "/sys/class/net/$ifn/statistics/${dir}_bytes"
}

# emunet_block TOTAL PARTS I: sets block_start and block_count to part I of TOTAL items cut into
# PARTS contiguous blocks, the first (TOTAL mod PARTS) one item larger (ranks over nodes, CPUs over
# nodes).
emunet_block()
{
    local total=$1 parts=$2 i=$3 per extra

    per=$((total / parts)) extra=$((total % parts))
    block_start=$((i * per + (i < extra ? i : extra)))
    block_count=$((per + (i < extra ? 1 : 0)))
}

# ---- a job: ranks on emulated nodes (run_collbench.sh, examples/run_ddp_emu.sh) ---------------
# The caller sets logdir ("" for a new folder under /tmp, removed at exit unless keep_logs=1),
# starts each rank in the background and stores its pid in rank_pids[r].

# emunet_job_start NAME NODES RATE LINKS MTU: own a new network (EMUNET_ID st<pid>, the sourcing
# script's), the log folder, a snapshot of /dev/shm, and an EXIT trap that stops the ranks, takes
# the network down and removes what they left in /dev/shm. Fills node_of[r] and local_of[r] for
# NP=$np ranks, and local_size[k], in contiguous blocks (emunet_block; EMUNET_LAYOUT="3,1" gives
# the ranks per node instead, summing to NP). Returns 1, said on stderr,
# when the network cannot be made.
emunet_job_start()
{
    local name=$1 nodes=$2 rate=$3 links=$4 mtu=$5 r k i

    emunet_job_name=$name
    emunet_cleanup_stale 2>/dev/null
    export EMUNET_ID="st$$"
    export EMUNET_OWNER=$$
    # /tmp/strata-emu.<pid>.*: cleanup-stale removes it if the script is SIGKILLed
    [ -n "$logdir" ] || logdir=$(mktemp -d "/tmp/strata-emu.$$.XXXXXX")
    mkdir -p "$logdir" || return 1
    emunet_job_shm="$logdir/.shm-before"
    rank_pids=()
    emunet_job_killer=""
    trap emunet_job_cleanup EXIT
    trap 'echo "$emunet_job_name: interrupted" >&2; exit 130' INT
    trap 'exit 143' TERM
    emunet_shm_snapshot "$emunet_job_shm"
    if ! emunet_up "$nodes" "$rate" "$links" "$mtu" >"$logdir/network.txt"; then
        echo "$name: cannot create the emulated network" >&2
        return 1
    fi
    node_of=() local_of=() local_size=()
    local -a counts=()
    if [ -n "${EMUNET_LAYOUT:-}" ]; then # "3,1": ranks per node, in order (uneven nodes)
        IFS=, read -r -a counts <<<"$EMUNET_LAYOUT"
        local sum=0 c
        for c in "${counts[@]}"; do sum=$((sum + c)); done
        if [ ${#counts[@]} -ne "$nodes" ] || [ "$sum" -ne "$np" ]; then
            echo "$name: EMUNET_LAYOUT $EMUNET_LAYOUT is not $np ranks on $nodes nodes" >&2
            return 1
        fi
    fi
    block_start=0
    for ((k = 0; k < nodes; k++)); do
        if [ ${#counts[@]} -gt 0 ]; then
            block_count=${counts[k]}
        else
            emunet_block "$np" "$nodes" "$k"
        fi
        local_size[k]=$block_count
        for ((i = 0; i < block_count; i++)); do
            r=$((block_start + i)) node_of[r]=$k local_of[r]=$i
        done
        [ ${#counts[@]} -gt 0 ] && block_start=$((block_start + block_count))
    done
    return 0
}

# emunet_rank_env: fills emunet_env with what every rank of a job needs on the emulated network,
# the user's settings kept: strata's bootstrap and UCX on the emulated link only
# (STRATA_SOCKET_IFNAME, UCX_NET_DEVICES) and a bootstrap timeout for slow, oversubscribed starts.
emunet_rank_env()
{
    emunet_env=(STRATA_SOCKET_IFNAME="${STRATA_SOCKET_IFNAME:-$EMUNET_IF}"
                UCX_NET_DEVICES="${UCX_NET_DEVICES:-$EMUNET_IF}"
                STRATA_BOOTSTRAP_TIMEOUT="${STRATA_BOOTSTRAP_TIMEOUT:-60s}")
}

# emunet_cpus: the CPUs this process may run on (Cpus_allowed_list: a cpuset or taskset is
# respected, unlike nproc's count, which OMP_NUM_THREADS also changes), ordered by package and
# core so that the hardware threads of one core are next to each other.
emunet_cpus()
{
    local list part c topo
    local -a cpus=() parts=()

    list=$(awk '/^Cpus_allowed_list:/ { print $2 }' /proc/self/status)
    IFS=, read -r -a parts <<<"${list:-0}"
    for part in "${parts[@]}"; do
        if [[ $part == *-* ]]; then
            for ((c = ${part%-*}; c <= ${part#*-}; c++)); do cpus+=("$c"); done
        else
            cpus+=("$part")
        fi
    done
    for c in "${cpus[@]}"; do
        topo=/sys/devices/system/cpu/cpu$c/topology
        echo "$(cat "$topo/physical_package_id" 2>/dev/null || echo 0)" \
             "$(cat "$topo/core_id" 2>/dev/null || echo "$c")" "$c"
    done | sort -n -k1,1 -k2,2 -k3,3 | awk '{ print $3 }'
}

# emunet_node_cpu NODE LOCAL NODES: sets emunet_cpu to the CPU for local rank LOCAL of emulated
# node NODE of NODES, giving each node CPUs of its own as real nodes have (run_collbench.sh
# --bind); call it in the job's shell, not in $(...), so that it works out the CPUs and warns
# once. Of the C CPUs of emunet_cpus, node k gets block k of NODES (emunet_block), whole cores
# where the block size allows, and local rank i the (i mod block)-th of its block. With NODES > C,
# nodes k and k+C share CPU k mod C (said on stderr).
emunet_node_cpu()
{
    local node=$1 loc=$2 nodes=$3 c

    [ -n "${emunet_cpu_list[*]:-}" ] || mapfile -t emunet_cpu_list < <(emunet_cpus)
    c=${#emunet_cpu_list[@]}
    if [ "$nodes" -ge "$c" ]; then
        if [ "$nodes" -gt "$c" ] && [ -z "${emunet_cpu_warned:-}" ]; then
            echo "emunet: $nodes nodes on $c CPUs: nodes k and k+$c share a CPU" >&2
            emunet_cpu_warned=1
        fi
        emunet_cpu=${emunet_cpu_list[node % c]}
    else
        emunet_block "$c" "$nodes" "$node"
        emunet_cpu=${emunet_cpu_list[block_start + loc % block_count]}
    fi
}

emunet_job_cleanup()
{
    local rc=$?

    trap - EXIT INT TERM
    [ -n "$emunet_job_killer" ] && kill "$emunet_job_killer" 2>/dev/null
    [ ${#rank_pids[@]} -gt 0 ] && kill -TERM "${rank_pids[@]}" 2>/dev/null
    emunet_down "$EMUNET_ID"
    emunet_shm_cleanup "$emunet_job_shm"
    if [ "${keep_logs:-0}" = 0 ]; then rm -rf "$logdir"; else rm -f "$emunet_job_shm"; fi
    exit "$rc"
}

# emunet_job_wait TIMEOUT: waits for every rank of rank_pids; rank_rc[r] their statuses. Once one
# fails the others cannot finish: it is named on stderr with the ranks still running, failed=1,
# and the rest are stopped 15 s later. TIMEOUT (seconds) names a status of 124 as the ranks'
# timeout, and bounds the job itself: ranks still running TIMEOUT + 20 s after the start (their
# own `timeout` wrapper should have ended them) are named, stopped (TERM, then KILL) and given
# status 124, so that no job can hang its caller.
emunet_job_wait()
{
    local tmo=$1 pid rc r deadline
    local -A running=() rank_of=()

    rank_rc=()
    failed=0
    deadline=$(( $(date +%s) + ${tmo%.*} + 20 ))
    for ((r = 0; r < ${#rank_pids[@]}; r++)); do
        running[${rank_pids[r]}]=1
        rank_of[${rank_pids[r]}]=$r
    done
    while [ ${#running[@]} -gt 0 ]; do
        for pid in "${!running[@]}"; do
            kill -0 "$pid" 2>/dev/null && continue
            wait "$pid"   # bash keeps the status of a reaped child for this
            rc=$?
            unset "running[$pid]"
            r=${rank_of[$pid]}
            rank_rc[r]=$rc
            if [ "$rc" != 0 ] && [ "$failed" = 0 ]; then
                failed=1
                echo "$emunet_job_name: rank $r (node ${node_of[r]}) exited with $rc" \
                     "$([ "$rc" = 124 ] && echo "(timeout ${tmo}s)")" \
                     "$(emunet_job_running running rank_of)" >&2
                # off the caller's stdout and stderr (a pipe reading them would wait for it),
                # and its sleep goes with it when the cleanup kills it
                (trap 'kill "$s" 2>/dev/null; exit 0' TERM
                 sleep 15 & s=$!
                 wait "$s" && kill -TERM "${rank_pids[@]}") </dev/null >/dev/null 2>&1 &
                emunet_job_killer=$!
            fi
        done
        if [ ${#running[@]} -gt 0 ] && [ "$(date +%s)" -ge "$deadline" ]; then
            echo "$emunet_job_name: ${tmo} s are up$(emunet_job_running running rank_of);" \
                 "stopping them" >&2
            for pid in "${!running[@]}"; do pkill -TERM -P "$pid" 2>/dev/null; done
            kill -TERM "${!running[@]}" 2>/dev/null
            sleep 2
            for pid in "${!running[@]}"; do pkill -KILL -P "$pid" 2>/dev/null; done
            kill -KILL "${!running[@]}" 2>/dev/null
            for pid in "${!running[@]}"; do
                wait "$pid" 2>/dev/null
                rank_rc[${rank_of[$pid]}]=124
                unset "running[$pid]"
            done
            failed=1
        fi
        [ ${#running[@]} -gt 0 ] && sleep 0.1
    done
}

# emunet_job_running RUNNING RANK_OF: "still running: rank 1 (node 0), ..." for the pids of the
# associative array named RUNNING ("" when none); RANK_OF maps a pid to its rank.
emunet_job_running()
{
    local -n jr_running=$1 jr_rank_of=$2
    local pid out="" r
    for pid in "${!jr_running[@]}"; do
        kill -0 "$pid" 2>/dev/null || continue
        r=${jr_rank_of[$pid]}
        out="$out${out:+, }rank $r (node ${node_of[r]})"
    done
    [ -n "$out" ] && echo "; still running: $out"
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
            local n="" rate="" links=1 mtu=""
            while [ $# -gt 0 ]; do
                case $1 in
                    --rate) rate=${2-}; shift; [ $# -gt 0 ] && shift ;;
                    --rate=*) rate=${1#--rate=}; shift ;;
                    --links) links=${2-}; shift; [ $# -gt 0 ] && shift ;;
                    --links=*) links=${1#--links=}; shift ;;
                    --mtu) mtu=${2-}; shift; [ $# -gt 0 ] && shift ;;
                    --mtu=*) mtu=${1#--mtu=}; shift ;;
                    --owner) EMUNET_OWNER=$2; shift 2 ;;
                    -*) emunet_log "up: unknown option $1"; emunet_usage; return 2 ;;
                    *) n=$1; shift ;;
                esac
            done
            [ -n "$n" ] || { emunet_usage; return 2; }
            local why
            why=$(emunet_unavailable)
            [ -z "$why" ] || { emunet_log "$why"; return 77; }
            emunet_up "$n" "$rate" "$links" "$mtu"
            ;;
        run)   [ $# -ge 2 ] || { emunet_usage; return 2; }; emunet_run "$@" ;;
        bytes) [ $# -ge 1 ] || { emunet_usage; return 2; }; emunet_ifbytes "$@" ;;
        ip)    emunet_ip "$@" ;;
        down)  emunet_down "$@" ;;
        link)  [ $# -ge 3 ] || { emunet_usage; return 2; }; emunet_link_set "$@" ;;
        wait)  emunet_wait_links "$@" ;;
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
