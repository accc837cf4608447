# shellcheck shell=bash
# bench/lib.sh: what bench/intra_node.sh, two_nodes.sh, hier_vs_ring.sh, rails.sh, sharded.sh and
# alltoall.sh share (sourced, not run): the rerunnable command line, the temporary folder and the
# exit trap that removes everything (process groups, emulated nodes, /dev/shm leftovers), launching ranks
# (forked here, or one per process inside emulated nodes), the honesty checks on each table
# (sizes, iterations, #wrong), medians over repetitions and the side-by-side table with ratios,
# the machine's description (bench_machine), tables of fractions of ceilings and PASS/FAIL verdicts.
#
# A "variant" is one column of a table: a run function called once per repetition as
#     RUNFN OUT            (writes the rank-0 table to OUT, returns the run's exit status)
# bench_variant KEY LABEL RUNFN runs it --reps times and leaves in $BENCH_TMP/KEY.status one of
#     ok | unavailable: why | failed: why | wrong: why
# and, when ok, $BENCH_TMP/KEY.med: "size median-time-out-of-place median-time-in-place" (us).
# bench_interleave "KEY LABEL RUNFN" ... does the same for several variants, run by run.
# No speed is ever reported for a variant whose runs had #wrong != 0 or did not check (-c 0).

BENCH_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BENCH_TOP=$(cd "$BENCH_HERE/.." && pwd)
BENCH_EMU=$BENCH_TOP/tests/emulation
# shellcheck source=../tests/emulation/emunet.sh
. "$BENCH_EMU/emunet.sh"

BENCH_REPS=3 BENCH_KEEP="" BENCH_COLLBENCH=${COLLBENCH:-} BENCH_TMO=300 BENCH_COL=oop
BENCH_TMP="" BENCH_NET="" BENCH_FAIL=0 BENCH_SHIFT=1
BENCH_MPI="" BENCH_MPI_WHY="" BENCH_GLOO="" BENCH_GLOO_WHY=""
# nccl-tests' bus-bandwidth factor of the tables (engine/op.c): "MUL RING", busbw = algbw * MUL,
# times (n-1)/n when RING is 1. bench_busbw_of COLL sets it; default all-reduce's 2(n-1)/n.
BENCH_BUSBW="2 1"
BENCH_PGIDS=()

bench_log() { echo "# $*"; }
bench_die() { echo "$BENCH_NAME: $*" >&2; exit 2; }

# Options every script takes; sets BENCH_SHIFT to the words used, returns 1 if not one of them.
#   --reps N  --collbench P  --keep DIR  --timeout S  --in-place
bench_common_opt()
{
    BENCH_SHIFT=2
    case $1 in
        --reps) BENCH_REPS=${2:?--reps N} ;;
        --collbench) BENCH_COLLBENCH=${2:?--collbench PATH} ;;
        --keep) BENCH_KEEP=${2:?--keep DIR} ;;
        --timeout) BENCH_TMO=${2:?--timeout S} ;;
        --in-place) BENCH_COL=ip; BENCH_SHIFT=1 ;;
        *) return 1 ;;
    esac
    return 0
}
BENCH_COMMON_HELP='  --reps N         runs per variant, the median is reported (3; at least 3 for numbers to quote)
  --collbench P    collbench binary (default $COLLBENCH, the tree'"'"'s top ./collbench, ./collbench)
  --keep DIR       copy every run'"'"'s output there
  --timeout S      seconds before one run is killed (300)
  --in-place       report the in-place half of each row (default: out of place)'

bench_help()
{
    sed -n '2,/^set -u/p' "$1" | sed -e '$d' -e 's/^# \{0,1\}//'
    echo "Common options:"
    echo "$BENCH_COMMON_HELP"
}

# bench_begin NAME "$@": print the command line to rerun, make the temporary folder, set the traps.
bench_begin()
{
    BENCH_NAME=$1
    shift
    local q="" a
    for a in "$@"; do q="$q $(printf '%q' "$a")"; done
    echo "# $BENCH_NAME: rerun with: cd $(printf '%q' "$PWD") && $(printf '%q' "$0")$q"
    echo "# $(date '+%F %T'), $(hostname), $(nproc) CPUs, $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)," \
         "load $(cut -d' ' -f1-3 /proc/loadavg)"
    # strata-emu.<pid>.*: emunet.sh cleanup-stale removes it if this script is SIGKILLed.
    BENCH_TMP=$(mktemp -d "${TMPDIR:-/tmp}/strata-emu.$$.bench-XXXXXX") || bench_die "mktemp failed"
    emunet_shm_snapshot "$BENCH_TMP/.shm-before"
    trap bench_cleanup EXIT
    trap 'echo "$BENCH_NAME: interrupted" >&2; exit 130' INT
    trap 'exit 143' TERM
}

# bench_machine [NP ...]: the machine the numbers come from, one '# machine:' line per item (CPU
# model, cores, hypervisor, L3, memory, kernel, Open MPI) and whether NP ranks oversubscribe its
# CPUs; then the same as a markdown header and row, to paste into a README table.
bench_machine()
{
    local lc model cpus sock cps tpc hyp l3 mem kern ompi np ranks="" over="" quota cores
    lc=$(LC_ALL=C lscpu 2>/dev/null)
    model=$(bench_lscpu_field "$lc" "Model name")
    [ -n "$model" ] || model=$(sed -n 's/^model name[[:space:]]*: *//p' /proc/cpuinfo | head -n 1)
    cpus=$(bench_lscpu_field "$lc" "CPU(s)") sock=$(bench_lscpu_field "$lc" "Socket(s)")
    cps=$(bench_lscpu_field "$lc" "Core(s) per socket") tpc=$(bench_lscpu_field "$lc" "Thread(s) per core")
    cores="${cpus:-?} CPUs (${sock:-?} socket(s) x ${cps:-?} core(s) x ${tpc:-?} thread(s) per core)"
    [ "$(nproc)" = "$cpus" ] || cores="$cores, $(nproc) usable (affinity)"
    quota=$(cat /sys/fs/cgroup/cpu.max 2>/dev/null)
    case $quota in ""|max*) ;; *) cores="$cores, cgroup quota $(awk '{ printf "%.1f", $1 / $2 }' <<<"$quota") CPUs" ;; esac
    hyp=$(bench_lscpu_field "$lc" "Hypervisor vendor")
    [ -n "$hyp" ] || hyp=$(systemd-detect-virt 2>/dev/null | grep -v '^none$')
    hyp=${hyp:-none detected}
    l3=$(bench_lscpu_field "$lc" "L3 cache")
    [ -n "$l3" ] || l3="$(( $(getconf LEVEL3_CACHE_SIZE 2>/dev/null || echo 0) / 1048576 )) MiB"
    mem=$(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)
    kern=$(uname -sr)
    ompi=$(ompi_info --version 2>/dev/null | head -n 1)
    [ -n "$ompi" ] || ompi=$(mpirun --version 2>/dev/null | head -n 1)
    ompi=$(sed -e 's/^mpirun (Open MPI) /v/' -e 's/^Open MPI //' <<<"$ompi")
    ompi=${ompi:-not installed}
    for np in "$@"; do
        if [ "$np" -gt "$(nproc)" ]; then
            ranks="$ranks; $np ranks on $(nproc) CPUs: oversubscribed"
            over="$over, $np oversubscribed"
        else
            ranks="$ranks; $np ranks on $(nproc) CPUs: not oversubscribed"
            over="$over, $np fit"
        fi
    done
    bench_log "machine: CPU: ${model:-unknown}"
    bench_log "machine: cores: $cores"
    bench_log "machine: hypervisor: $hyp"
    bench_log "machine: L3: $l3"
    bench_log "machine: memory: $mem"
    bench_log "machine: kernel: $kern"
    bench_log "machine: Open MPI: $ompi"
    [ -n "$ranks" ] && bench_log "machine: ranks: ${ranks#; }"
    bench_log "| CPU | cores | hypervisor | L3 | memory | kernel | Open MPI |$([ -n "$over" ] && echo " ranks |")"
    bench_log "| ${model:-unknown} | $cores | $hyp | $l3 | $mem | $kern | $ompi |$([ -n "$over" ] && echo " ${over#, } |")"
}

bench_lscpu_field() { sed -n "s/^$2: *//p" <<<"$1" | head -n 1; }

bench_kill_groups()
{
    local g
    [ ${#BENCH_PGIDS[@]} -gt 0 ] || return 0
    for g in "${BENCH_PGIDS[@]}"; do kill -TERM -- "-$g" 2>/dev/null; done
    sleep 0.5
    for g in "${BENCH_PGIDS[@]}"; do kill -KILL -- "-$g" 2>/dev/null; done
    BENCH_PGIDS=()
}

bench_cleanup()
{
    local rc=$?
    trap - EXIT INT TERM
    bench_kill_groups
    [ -n "$BENCH_NET" ] && emunet_down "$BENCH_NET"
    if [ -n "$BENCH_TMP" ] && [ -d "$BENCH_TMP" ]; then
        emunet_shm_cleanup "$BENCH_TMP/.shm-before"
        if [ -n "$BENCH_KEEP" ]; then
            mkdir -p "$BENCH_KEEP" && cp "$BENCH_TMP"/*.out "$BENCH_KEEP"/ 2>/dev/null &&
                echo "# outputs of every run kept in $BENCH_KEEP"
        fi
        rm -rf "$BENCH_TMP"
    fi
    exit "$rc"
}

# collbench: --collbench, $COLLBENCH, the tree's top (in-tree build), ./collbench (build folder).
bench_find_collbench()
{
    local c
    if [ -z "$BENCH_COLLBENCH" ]; then
        for c in "$BENCH_TOP/collbench" ./collbench; do
            [ -x "$c" ] && { BENCH_COLLBENCH=$c; break; }
        done
    fi
    [ -n "$BENCH_COLLBENCH" ] && [ -x "$BENCH_COLLBENCH" ] ||
        bench_die "collbench not found (build strata, or give --collbench PATH / COLLBENCH)"
    BENCH_COLLBENCH=$(cd "$(dirname "$BENCH_COLLBENCH")" && pwd)/$(basename "$BENCH_COLLBENCH")
    # A libtool wrapper resolves itself on first use: once here, not once per rank at the same time.
    timeout 60 "$BENCH_COLLBENCH" --help >"$BENCH_TMP/collbench-help.txt" 2>&1 </dev/null
    bench_log "collbench: $BENCH_COLLBENCH"
}

# bench_exec OUT cmd...: run cmd in a process group of its own (killed as a whole on exit), with
# the run timeout, stdout and stderr to OUT; returns its exit status.
bench_exec()
{
    local out=$1 pid rc
    shift
    setsid timeout -k 10 "$BENCH_TMO" "$@" >"$out" 2>&1 </dev/null &
    pid=$!
    BENCH_PGIDS+=("$pid")
    wait "$pid"
    rc=$?
    bench_forget "$pid"
    return "$rc"
}

bench_forget()
{
    local g keep=()
    for g in "${BENCH_PGIDS[@]}"; do [ "$g" = "$1" ] || keep+=("$g"); done
    BENCH_PGIDS=("${keep[@]}")
}

# bench_ranks OUT NP CMDFN: start NP processes, rank r running the command that `CMDFN r` puts in
# the array BENCH_CMD (each in its own process group); OUT gets rank 0's output, and on failure the
# last lines of the others'. Once a rank fails the others get 10 s, then are killed. Returns rank
# 0's status, or the first failing rank's.
bench_ranks()
{
    local out=$1 np=$2 cmdfn=$3 r pid rc status=0 deadline="" left
    local -a pids=() rcs=()
    for ((r = 0; r < np; r++)); do
        BENCH_CMD=()
        "$cmdfn" "$r"
        setsid timeout -k 10 "$BENCH_TMO" "${BENCH_CMD[@]}" >"$out.rank$r" 2>&1 </dev/null &
        pids[r]=$!
        BENCH_PGIDS+=("${pids[r]}")
    done
    left=$np
    while [ "$left" -gt 0 ]; do
        for ((r = 0; r < np; r++)); do
            [ -n "${rcs[r]:-}" ] && continue
            kill -0 "${pids[r]}" 2>/dev/null && continue
            wait "${pids[r]}"
            rcs[r]=$?
            left=$((left - 1))
            bench_forget "${pids[r]}"
            if [ "${rcs[r]}" != 0 ] && [ "$status" = 0 ]; then
                status=${rcs[r]}
                deadline=$((SECONDS + 10))
            fi
        done
        if [ -n "$deadline" ] && [ "$SECONDS" -ge "$deadline" ]; then
            for ((r = 0; r < np; r++)); do
                [ -z "${rcs[r]:-}" ] && kill -KILL -- "-${pids[r]}" 2>/dev/null
            done
            deadline=""
        fi
        [ "$left" -gt 0 ] && sleep 0.1
    done
    [ "${rcs[0]}" != 0 ] && status=${rcs[0]}
    cp "$out.rank0" "$out"
    if [ "$status" != 0 ]; then
        for ((r = 1; r < np; r++)); do
            [ "${rcs[r]}" = 0 ] && continue
            { echo "---- rank $r exited with ${rcs[r]}, last lines:"; tail -n 15 "$out.rank$r"; } >>"$out"
        done
    fi
    rm -f "$out".rank*
    return "$status"
}

# ---- sweeps: one run of a variant as one or two nccl-tests sweeps --------------------------------
# The largest sizes cost most per call and need few calls; the small ones are cheap and noisy.
# bench_sweeps MIN MAX FACTOR ITERS WARMUP SMALL_MAX SMALL_ITERS SMALL_WARMUP: sizes up to
# SMALL_MAX get SMALL_ITERS timed calls, the larger ones ITERS (SMALL_MAX 0: one sweep, ITERS).
# Sets BENCH_SWEEPS ("min max iters warmup" in bytes, per sweep) and BENCH_FACTOR.
bench_to_bytes()
{
    awk -v s="$1" 'BEGIN { v = s + 0; u = tolower(substr(s, length(s)))
        if (u == "k") v *= 1024; else if (u == "m") v *= 1048576; else if (u == "g") v *= 1073741824
        printf "%.0f\n", v }'
}
bench_sweeps()
{
    local b0 b1 bs f=$3 large
    b0=$(bench_to_bytes "$1") b1=$(bench_to_bytes "$2") bs=$(bench_to_bytes "$6")
    BENCH_FACTOR=$f
    [ "$f" -ge 2 ] 2>/dev/null || bench_die "-f must be an integer >= 2"
    large=$b0
    while [ "$large" -le "$bs" ]; do large=$((large * f)); done
    if [ "$bs" -lt "$b0" ]; then
        BENCH_SWEEPS=("$b0 $b1 $4 $5")
    elif [ "$large" -gt "$b1" ]; then
        BENCH_SWEEPS=("$b0 $b1 $7 $8")
    else
        BENCH_SWEEPS=("$b0 $bs $7 $8" "$large $b1 $4 $5")
    fi
}
# The nccl-tests flags of sweep I (the same for every program), with the check on.
bench_sweep_args()
{
    local mn mx n w
    read -r mn mx n w <<<"${BENCH_SWEEPS[$1]}"
    echo "-b $mn -e $mx -f $BENCH_FACTOR -n $n -w $w -c 1"
}
bench_log_sweeps()
{
    local i
    for i in "${!BENCH_SWEEPS[@]}"; do
        bench_log "sweep $((i + 1)) of ${#BENCH_SWEEPS[@]} in each run: $(bench_sweep_args "$i")"
    done
}
# bench_run_sweeps OUT FN: FN OUT.I with the sweep's flags in the array BENCH_SW, for every sweep;
# the outputs joined into OUT; returns the first failing sweep's status.
bench_run_sweeps()
{
    local out=$1 fn=$2 i rc status=0
    : >"$out"
    for i in "${!BENCH_SWEEPS[@]}"; do
        read -r -a BENCH_SW <<<"$(bench_sweep_args "$i")"
        "$fn" "$out.$i"
        rc=$?
        cat "$out.$i" >>"$out"
        rm -f "$out.$i"
        [ "$rc" != 0 ] && { status=$rc; break; }
    done
    return "$status"
}

# ---- emulated nodes ----------------------------------------------------------------------------
# bench_net_up NODES RATE [LINKS [MTU]]: the emulated network of this run (removed on exit).
bench_net_up()
{
    local why
    why=$(emunet_unavailable)
    if [ -n "$why" ]; then echo "SKIP: $BENCH_NAME needs emulated nodes (network namespaces): $why"; exit 77; fi
    emunet_cleanup_stale >/dev/null 2>&1
    export EMUNET_ID="st$$" EMUNET_OWNER=$$
    BENCH_NET=$EMUNET_ID
    emunet_up "$@" >"$BENCH_TMP/network.txt" || bench_die "cannot create the emulated network"
    sed 's/^/# network: /' "$BENCH_TMP/network.txt"
}

# bench_net_down: remove this run's emulated network now (a script that builds a second one).
bench_net_down()
{
    [ -n "$BENCH_NET" ] || return 0
    bench_kill_groups
    emunet_down "$BENCH_NET"
    BENCH_NET=""
}

# Processes left in our nodes after a failed run (the next run must start clean).
bench_net_reap()
{
    local ns left=""
    [ -n "$BENCH_NET" ] || return 0
    for ns in $(ip netns list | awk '{print $1}' | grep -E "^${BENCH_NET}n[0-9]+\$"); do
        left="$left $(ip netns pids "$ns" 2>/dev/null)"
    done
    left=$(emunet_not_me $left)
    [ -n "${left// /}" ] || return 0
    # shellcheck disable=SC2086
    kill -TERM $left 2>/dev/null
    sleep 1
    # shellcheck disable=SC2086
    kill -KILL $left 2>/dev/null
    return 0
}

# Node of rank r: contiguous blocks of np/nodes ranks (rank 0 on node 0), as run_collbench.sh.
bench_node_of() { echo $(( $1 * $3 / $2 )); }   # r np nodes (equal blocks)

# The command prefix that runs in node k with its UTS hostname (emunet_run, without the shell).
bench_in_node()
{
    local k=$1
    BENCH_CMD=(ip netns exec "${BENCH_NET}n$k" unshare --uts sh -c 'hostname "$0" && exec "$@"'
               "node$k")
}

# collbench, one process per rank in the emulated nodes: BENCH_NP, BENCH_NODES, BENCH_ENV (extra
# VAR=value words), BENCH_ARGS (collbench's arguments).
bench_emu_collbench_cmd()
{
    local r=$1 k
    k=$(bench_node_of "$r" "$BENCH_NP" "$BENCH_NODES")
    bench_in_node "$k"
    BENCH_CMD+=(env STRATA_COMM_ID="$(emunet_ip 0):$BENCH_PORT"
                STRATA_SOCKET_IFNAME="${STRATA_SOCKET_IFNAME:-$EMUNET_IF}"
                STRATA_BOOTSTRAP_TIMEOUT="${STRATA_BOOTSTRAP_TIMEOUT:-60s}"
                UCX_NET_DEVICES="${UCX_NET_DEVICES:-$EMUNET_IF}"
                "${BENCH_ENV[@]}"
                "$BENCH_COLLBENCH" --rank "$r" --nranks "$BENCH_NP" "${BENCH_ARGS[@]}")
}
bench_emu_collbench()
{
    BENCH_PORT=$(emunet_root_port)
    bench_ranks "$1" "$BENCH_NP" bench_emu_collbench_cmd
}

# gloo_allreduce, one process per rank; in the emulated nodes when BENCH_NET is set (listening on
# the node's link-0 address), else here on 127.0.0.1. BENCH_NP, BENCH_NODES, BENCH_ARGS.
bench_gloo_cmd()
{
    local r=$1 k host=127.0.0.1
    BENCH_CMD=()
    if [ -n "$BENCH_NET" ]; then
        k=$(bench_node_of "$r" "$BENCH_NP" "$BENCH_NODES")
        bench_in_node "$k"
        host=$(emunet_ip "$k")
    fi
    BENCH_CMD+=("$BENCH_GLOO" --rank "$r" --size "$BENCH_NP" --store "$BENCH_GLOO_STORE"
                --host "$host" --timeout "$BENCH_TMO" "${BENCH_ARGS[@]}")
}
bench_gloo()
{
    BENCH_GLOO_STORE=$(mktemp -d "$BENCH_TMP/gloo-store.XXXXXX")
    bench_ranks "$1" "$BENCH_NP" bench_gloo_cmd
    local rc=$?
    rm -rf "$BENCH_GLOO_STORE"
    return "$rc"
}

# ---- baselines built at run time -----------------------------------------------------------------
# bench_unavail OUT WHY: what a run function does when its program is missing.
bench_unavail() { echo "BENCH-UNAVAILABLE: $2" >"$1"; return 2; }

# bench_build_mpi [NAME]: $BENCH_TMP/NAME built from bench/NAME.c (default mpi_allreduce) in
# BENCH_MPI, or BENCH_MPI_WHY says why not.
bench_build_mpi()
{
    local name=${1:-mpi_allreduce}
    BENCH_MPI="" BENCH_MPI_WHY=""
    if ! command -v mpicc >/dev/null 2>&1 || ! command -v mpirun >/dev/null 2>&1; then
        BENCH_MPI_WHY="mpicc/mpirun not found (apt-get install openmpi-bin libopenmpi-dev)"
    elif ! mpirun --version 2>/dev/null | grep -q "Open MPI"; then
        BENCH_MPI_WHY="mpirun is not Open MPI's"
    elif ! mpicc -O2 -o "$BENCH_TMP/$name" "$BENCH_HERE/$name.c" \
            >"$BENCH_TMP/mpicc.log" 2>&1; then
        BENCH_MPI_WHY="mpicc failed: $(tail -n 1 "$BENCH_TMP/mpicc.log")"
    else
        BENCH_MPI=$BENCH_TMP/$name
        bench_log "Open MPI: $(mpirun --version 2>/dev/null | head -n 1)"
    fi
}

# bench_build_gloo [install]: $BENCH_TMP/gloo_allreduce, or BENCH_GLOO_WHY says why not. With
# "install" (a script's --install-gloo), a missing libgloo-dev is installed first (apt-get, root).
bench_build_gloo()
{
    BENCH_GLOO="" BENCH_GLOO_WHY=""
    local cxx=${CXX:-c++} install=${1:-}
    if ! command -v "$cxx" >/dev/null 2>&1; then
        BENCH_GLOO_WHY="no C++ compiler ($cxx)"
        return 0
    fi
    if ! bench_have_gloo "$cxx" && [ "$install" = install ]; then
        bench_install_gloo "$cxx" || return 0
    fi
    if ! bench_have_gloo "$cxx"; then
        BENCH_GLOO_WHY="libgloo-dev not installed (Debian 12: apt-get install libgloo-dev, or --install-gloo)"
    elif ! "$cxx" -O2 -std=c++17 -o "$BENCH_TMP/gloo_allreduce" "$BENCH_HERE/gloo_allreduce.cc" \
            -lgloo -pthread >"$BENCH_TMP/gloo-build.log" 2>&1; then
        BENCH_GLOO_WHY="building gloo_allreduce.cc failed: $(grep -m1 -i error "$BENCH_TMP/gloo-build.log")"
    else
        BENCH_GLOO=$BENCH_TMP/gloo_allreduce
        bench_log "Gloo: $(dpkg-query -W -f '${Package} ${Version}' libgloo-dev 2>/dev/null || echo libgloo),"\
                  "tcp transport, FileStore rendezvous"
    fi
}
bench_have_gloo() { echo '#include <gloo/allreduce.h>' | "$1" -std=c++17 -E -x c++ - >/dev/null 2>&1; }

# bench_install_gloo CXX: apt-get install -y libgloo-dev (root only; apt-get update once when the
# package is not found). Returns 1 with BENCH_GLOO_WHY set when it could not.
bench_install_gloo()
{
    local log=$BENCH_TMP/gloo-install.log
    if [ "$(id -u)" != 0 ]; then
        BENCH_GLOO_WHY="--install-gloo: installing libgloo-dev needs root (apt-get)"; return 1
    fi
    if ! command -v apt-get >/dev/null 2>&1; then
        BENCH_GLOO_WHY="--install-gloo: no apt-get here (install Gloo's headers and library by hand)"; return 1
    fi
    bench_log "--install-gloo: libgloo-dev missing, apt-get install -y libgloo-dev ..."
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y libgloo-dev >"$log" 2>&1; then
        # stale or missing package lists: update them once and try again
        DEBIAN_FRONTEND=noninteractive apt-get update >>"$log" 2>&1
        if ! DEBIAN_FRONTEND=noninteractive apt-get install -y libgloo-dev >>"$log" 2>&1; then
            BENCH_GLOO_WHY="--install-gloo: apt-get install -y libgloo-dev failed: $(tail -n 1 "$log")"
            return 1
        fi
    fi
    bench_have_gloo "$1" ||
        { BENCH_GLOO_WHY="--install-gloo: libgloo-dev installed, but $1 does not find <gloo/allreduce.h>"; return 1; }
    bench_log "--install-gloo: installed $(dpkg-query -W -f '${Package} ${Version}' libgloo-dev 2>/dev/null)"
}

# ---- checking and summarizing runs --------------------------------------------------------------
# Rows of a table: size, out-of-place time (us) and #wrong, in-place time and #wrong. Read from the
# end of the row: collbench leaves the redop column empty where no op applies (alltoall: 12 words).
bench_rows()
{
    # nccl-tests' 13 columns; collbench --compress adds wire and two speedups after them
    awk '!/^#/ && $1 ~ /^[0-9]+$/ && NF >= 12 { n = (NF >= 16) ? 13 : NF
         print $1, $(n-7), $(n-4), $(n-3), $n }' "$1"
}
bench_hdr_iters()
{
    awk '{ for (i = 2; i < NF; i++) if ($i == "iters:" && $(i-1) != "warmup" && $(i-1) != "agg")
           { print $(i+1); exit } }' "$1"
}

# Why a failed run is "unavailable" rather than a failure (the feature is not in this build, or
# a run function wrote "BENCH-UNAVAILABLE: why" and returned non-zero).
bench_unavailable_reason()
{
    local f=$1 line
    # A run function that cannot run at all says so on its first line.
    line=$(sed -n '1s/^BENCH-UNAVAILABLE: //p' "$f")
    [ -n "$line" ] && { echo "$line"; return 0; }
    line=$(grep -m1 -o -E "STRATA_[A-Z_]+ '[^']*' is unknown.*" "$f") &&
        { echo "this strata does not know it: $line"; return 0; }
    line=$(grep -m1 -E "(invalid|unrecognized|unknown) option" "$f") &&
        { echo "this collbench does not take the option: ${line##*: }"; return 0; }
    return 1
}

# bench_variant KEY LABEL RUNFN: --reps runs, checked; see the top of this file.
bench_variant()
{
    local rep
    bench_variant_start "$1" "$2"
    for ((rep = 1; rep <= BENCH_REPS; rep++)); do
        bench_variant_rep "$1" "$3" "$rep" || break
    done
    bench_variant_end "$1"
}

# bench_interleave "KEY LABEL RUNFN" ... (one word each): as bench_variant for each, but run 1 of every variant,
# then run 2 of every variant, ...: a load that drifts during the runs (a shared machine) then
# weighs on every column alike, which the ratios between them need. A variant that fails or is
# wrong in one run is not run again.
bench_interleave()
{
    local v rep key label fn
    for v in "$@"; do read -r key label fn <<<"$v"; bench_variant_start "$key" "$label"; done
    for ((rep = 1; rep <= BENCH_REPS; rep++)); do
        for v in "$@"; do
            read -r key label fn <<<"$v"
            [ "$rep" = 1 ] || [ "$(bench_status "$key")" = ok ] || continue
            bench_variant_rep "$key" "$fn" "$rep"
        done
    done
    for v in "$@"; do read -r key label fn <<<"$v"; bench_variant_end "$key"; done
}

# The pieces of both: start (label, no rows yet), one run (checked; returns 1 when the variant
# is done for: failed, wrong or unavailable), end (medians, or the reason under the table).
bench_variant_start()
{
    echo "$2" >"$BENCH_TMP/$1.label"
    : >"$BENCH_TMP/$1.all"
    echo "failed: no run" >"$BENCH_TMP/$1.status"
}

bench_variant_rep()
{
    local key=$1 fn=$2 rep=$3 out rc t0 why it want_iters label
    local st="$BENCH_TMP/$key.status"
    label=$(cat "$BENCH_TMP/$key.label")
    out="$BENCH_TMP/$key.$rep.out"
    t0=$SECONDS
    "$fn" "$out"
    rc=$?
    bench_rows "$out" >"$out.rows"
    # A half whose time is N/A did not run (the all-to-alls have no in-place form); one that ran
    # must have checked, with #wrong 0.
    if awk '$3 != "0" || ($4 != "N/A" && $5 != "0") { bad = 1 } END { exit !bad }' "$out.rows"; then
        echo "wrong: #wrong != 0 or unchecked in run $rep (exit $rc); no speed reported" >"$st"
        { echo "---- $label, run $rep:"; cat "$out"; } >>"$BENCH_TMP/failures.txt"
        return 1
    fi
    if [ "$rc" != 0 ]; then
        if why=$(bench_unavailable_reason "$out"); then
            echo "unavailable: $why" >"$st"
        else
            echo "failed: run $rep exited with $rc$([ "$rc" = 124 ] && echo " (timeout ${BENCH_TMO}s)")" >"$st"
            { echo "---- $label, run $rep (exit $rc):"; tail -n 40 "$out"; } >>"$BENCH_TMP/failures.txt"
        fi
        [ -n "$BENCH_NET" ] && bench_net_reap
        return 1
    fi
    if [ ! -s "$out.rows" ]; then
        echo "failed: run $rep printed no table" >"$st"
        { echo "---- $label, run $rep:"; tail -n 40 "$out"; } >>"$BENCH_TMP/failures.txt"
        return 1
    fi
    it=$(bench_hdr_iters "$out")
    want_iters=$(bench_hdr_iters "$BENCH_TMP/$key.1.out")
    if [ "$rep" -gt 1 ] && ! cmp -s <(cut -d' ' -f1 "$out.rows") <(cut -d' ' -f1 "$BENCH_TMP/$key.1.out.rows"); then
        echo "failed: run $rep has other sizes than run 1" >"$st"; return 1
    fi
    [ "$it" = "$want_iters" ] || { echo "failed: iterations differ between runs" >"$st"; return 1; }
    cat "$out.rows" >>"$BENCH_TMP/$key.all"
    echo "ok" >"$st"
    printf '#   %-28s run %d/%d: ok, %d s\n' "$label" "$rep" "$BENCH_REPS" $((SECONDS - t0))
    return 0
}

bench_variant_end()
{
    local key=$1 st="$BENCH_TMP/$1.status"
    if [ "$(cat "$st")" = ok ]; then
        # Median per size of each half's time (the middle one; the mean of the two middle ones).
        sort -n -k1,1 "$BENCH_TMP/$key.all" | awk '
            function med(a, n,   i, j, t) {
                for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j+1] = a[j]; a[j+1] = t }
                return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
            function flush() { if (n) printf "%s %s %s\n", size, med(o, n), med(p, n); n = 0 }
            $1 != size { flush(); size = $1 }
            { n++; o[n] = $2; p[n] = $4 }
            END { flush() }' >"$BENCH_TMP/$key.med"
    else
        printf '#   %-28s %s\n' "$(cat "$BENCH_TMP/$key.label")" "$(cat "$st")"
        [ "$(cut -d: -f1 "$st")" = unavailable ] || BENCH_FAIL=1
    fi
}

bench_status() { cat "$BENCH_TMP/$1.status" 2>/dev/null || echo "unavailable: not run"; }
bench_ok() { [ "$(bench_status "$1")" = ok ]; }

# Median time (us) of a key at a size, the reported half (--in-place or not); empty if none.
bench_time()
{
    [ -f "$BENCH_TMP/$1.med" ] || return 0
    awk -v s="$2" -v c="$BENCH_COL" '$1 == s { print (c == "ip") ? $3 : $2 }' "$BENCH_TMP/$1.med"
}

# bench_busbw_of COLL: the tables' busbw factor for a collective (nccl-tests', as collbench's):
# all_reduce 2(n-1)/n, reduce_scatter, all_gather and alltoall (n-1)/n, broadcast and reduce 1.
bench_busbw_of()
{
    case $1 in
        all_reduce) BENCH_BUSBW="2 1" ;;
        reduce_scatter|all_gather|alltoall) BENCH_BUSBW="1 1" ;;
        broadcast|reduce) BENCH_BUSBW="1 0" ;;
        *) bench_die "no busbw factor for collective '$1'" ;;
    esac
}

# bench_busbw KEY SIZE NP: busbw (GB/s) of a key's median at a size, with BENCH_BUSBW's factor
# (the reported half); empty when it has none. S is the table's size (nccl-tests': the larger of
# the send and receive buffers), algbw = S / t.
bench_busbw()
{
    local t
    t=$(bench_time "$1" "$2")
    [ -n "$t" ] || return 0
    awk -v size="$2" -v t="$t" -v np="$3" -v f="$BENCH_BUSBW" 'BEGIN { split(f, m, " ")
        x = size / (t * 1e-6) / 1e9
        if (t > 0) printf "%.6f\n", m[2] ? x * m[1] * (np - 1) / np : x * m[1] }'
}

# bench_table NP CEIL "key ..." "a/b ..." "key ...": the table. Columns: size, busbw (GB/s, from
# the median time, nccl-tests' factor of BENCH_BUSBW: all-reduce's 2(n-1)/n unless bench_busbw_of
# said otherwise) of every key that ran, the ratios a/b,
# then the ceiling (busbw, GB/s; none when CEIL is empty) and the fraction of it for the last
# list's keys. Keys that did not run are listed under the table with the reason. Geometric means
# of the ratio columns close it.
bench_table()
{
    local np=$1 ceil=$2 keys=$3 ratios=$4 fracs=$5 k a b spec="" sizes ref=""
    for k in $keys; do bench_ok "$k" && { ref=$k; break; }; done
    if [ -z "$ref" ]; then
        echo "# no variant ran; nothing to tabulate"
        bench_table_status "$keys"
        return 0
    fi
    # One line per size: size, then each key's time or '-'.
    for k in $keys; do
        bench_ok "$k" && spec="$spec $k=$(tr -d ' ' <"$BENCH_TMP/$k.label")"
    done
    local r
    for r in $ratios; do
        a=${r%/*} b=${r#*/}
        bench_ok "$a" && bench_ok "$b" && spec="$spec ratio:$a/$b"
    done
    [ -n "$ceil" ] && spec="$spec ceil"
    for k in $fracs; do [ -n "$ceil" ] && bench_ok "$k" && spec="$spec frac:$k"; done
    sizes=$(cut -d' ' -f1 "$BENCH_TMP/$ref.med")
    {
        for s in $sizes; do
            printf '%s' "$s"
            for k in $keys; do
                bench_ok "$k" || continue
                t=$(bench_time "$k" "$s")
                printf ' %s=%s' "$k" "${t:--}"
            done
            echo
        done
    } | awk -v np="$np" -v ceil="$ceil" -v spec="$spec" -v bf="$BENCH_BUSBW" '
        function lab(k) { return (k in label) ? label[k] : k }
        BEGIN {
            split(bf, bm, " ")
            n = split(spec, col, " ")
            for (i = 1; i <= n; i++) if (index(col[i], "=") && col[i] !~ /^(ratio|frac):/) {
                split(col[i], kv, "="); label[kv[1]] = kv[2]; col[i] = kv[1] }
            hdr = sprintf("%10s", "size (B)")
            for (i = 1; i <= n; i++) {
                c = col[i]
                if (c ~ /^ratio:/) { split(substr(c, 7), ab, "/"); h = lab(ab[1]) "/" lab(ab[2]) }
                else if (c == "ceil") h = "ceiling"
                else if (c ~ /^frac:/) h = lab(substr(c, 6)) "/ceil"
                else h = lab(c)
                w[i] = (length(h) > 9) ? length(h) : 9
                hdr = hdr sprintf("  %" w[i] "s", h)
            }
            print "  " hdr
        }
        function bw(k,   t) { t = tm[k]; if (t == "" || t == "-" || t <= 0) return -1
                              return bm[2] ? size / (t * 1e-6) / 1e9 * bm[1] * (np - 1) / np : size / (t * 1e-6) / 1e9 * bm[1] }
        {
            size = $1; delete tm
            for (i = 2; i <= NF; i++) { split($i, kv, "="); tm[kv[1]] = kv[2] }
            line = sprintf("%10d", size)
            for (i = 1; i <= n; i++) {
                c = col[i]
                if (c ~ /^ratio:/) {
                    split(substr(c, 7), ab, "/"); x = bw(ab[1]); y = bw(ab[2])
                    if (x > 0 && y > 0) { v = sprintf("%.2f", x / y); lr[c] += log(x / y); nr[c]++ } else v = "-"
                } else if (c == "ceil") v = sprintf("%.4f", ceil)
                else if (c ~ /^frac:/) { x = bw(substr(c, 6)); v = (x > 0 && ceil > 0) ? sprintf("%.2f", x / ceil) : "-" }
                else { x = bw(c); v = (x > 0) ? sprintf("%.4f", x) : "-" }
                line = line sprintf("  %" w[i] "s", v)
            }
            print "  " line
        }
        END {
            for (i = 1; i <= n; i++) if (col[i] in nr && nr[col[i]] > 0) {
                split(substr(col[i], 7), ab, "/")
                printf "# geometric mean of %s / %s: %.2f over %d sizes\n", lab(ab[1]), lab(ab[2]),
                       exp(lr[col[i]] / nr[col[i]]), nr[col[i]]
            }
        }'
    bench_table_status "$keys"
}

# bench_ceil_table NP "NAME=CEIL ..." "KEY@NAME ...": ceilings (busbw, GB/s) and the fraction of
# its ceiling NAME that each KEY reached (busbw / ceiling) per size; keys that did not run are left
# out (bench_table lists them). Columns: size, every ceiling, then KEY/NAME.
bench_ceil_table()
{
    local np=$1 ceils=$2 fracs=$3 c k n sizes s hdr line v x
    local -A cval=()
    for c in $ceils; do cval[${c%%=*}]=${c#*=}; done
    local ok=()
    for k in $fracs; do bench_ok "${k%@*}" && ok+=("$k"); done
    if [ ${#ok[@]} -eq 0 ]; then echo "# no variant ran; no fractions of a ceiling"; return 0; fi
    sizes=$(for k in "${ok[@]}"; do cut -d' ' -f1 "$BENCH_TMP/${k%@*}.med"; done | sort -n -u)
    hdr=$(printf '%10s' "size (B)")
    for c in $ceils; do hdr="$hdr$(printf '  %9s' "${c%%=*}")"; done
    for k in "${ok[@]}"; do
        n="$(tr -d ' ' <"$BENCH_TMP/${k%@*}.label")/${k#*@}"
        hdr="$hdr$(printf "  %${#n}s" "$n")"
    done
    echo "  $hdr"
    for s in $sizes; do
        line=$(printf '%10d' "$s")
        for c in $ceils; do line="$line$(printf '  %9.4f' "${c#*=}")"; done
        for k in "${ok[@]}"; do
            n="$(tr -d ' ' <"$BENCH_TMP/${k%@*}.label")/${k#*@}"
            x=$(bench_busbw "${k%@*}" "$s" "$np")
            v=$(awk -v x="$x" -v c="${cval[${k#*@}]}" 'BEGIN { if (x > 0 && c > 0) printf "%.2f", x / c; else print "-" }')
            line="$line$(printf "  %${#n}s" "$v")"
        done
        echo "  $line"
    done
}

# bench_sizes_from MIN KEY...: the sizes (bytes) of the keys' medians from MIN (k/M/G) on, over
# the keys that ran, one per line.
bench_sizes_from()
{
    local min k
    min=$(bench_to_bytes "$1")
    shift
    for k in "$@"; do bench_ok "$k" && cut -d' ' -f1 "$BENCH_TMP/$k.med"; done |
        awk -v m="$min" '$1 >= m' | sort -n -u
}

# bench_verdict_of LIMIT < lines "value size" (value empty: not measured at that size): PASS when
# every size was measured and every value is at least LIMIT, with the lowest value and where;
# FAIL naming the sizes below LIMIT (or not measured).
bench_verdict_of()
{
    awk -v lim="$1" '
        NF == 0 { next }
        NF < 2 { miss = miss " " $1; next }
        { n++; if (min == "" || $1 < min) { min = $1; at = $2 } if ($1 < lim) { bad++; where = where " " $2 } }
        END {
            if (miss != "" || n == 0) { printf "FAIL (not measured at%s)", (miss == "" ? " any size" : miss); exit }
            printf "%s (lowest %.2f at %d B%s)", bad ? "FAIL" : "PASS", min, at, bad ? ", below " lim " at" where " B" : "" }'
}

# One line per key that did not run, with the reason.
bench_table_status()
{
    local k
    for k in $1; do
        bench_ok "$k" || printf '# %s: %s\n' "$(cat "$BENCH_TMP/$k.label" 2>/dev/null || echo "$k")" "$(bench_status "$k")"
    done
}

# bench_end: failures in detail, then the exit status (0: ran; 1: a variant failed or was wrong).
bench_end()
{
    if [ -s "$BENCH_TMP/failures.txt" ]; then
        echo "# ---- failed or wrong runs (outputs) ----"
        cat "$BENCH_TMP/failures.txt"
    fi
    echo "# $BENCH_NAME done in ${SECONDS} s"
    exit "$BENCH_FAIL"
}
