#!/bin/bash
# verbs_check.sh: the hardware check of the verbs transport (transports/verbs/) on a machine with
# RDMA HCAs (one node: ranks on this machine talk through its HCA in loopback), or two (--peer):
#   0 env       ibv_devinfo -v (or ibv_devices), ibstat / `rdma link`, `ulimit -l`, show_gids,
#               uname, the rdma-core version; the ACTIVE ports, their link layer and GIDs; the
#               transport's view (STRATA_NET=verbs STRATA_DEBUG=INFO, VERBS,INIT: collbench
#               all_reduce -np 2 -b 8 -e 8 -n 1) and the HCA port and GID index it chose
#   1 perftest  the physical anchor: ib_write_bw -a --report_gbits -F and ib_write_lat -a
#               (-d HCA, -x GID index on RoCE), server on this machine (loopback) or on the peer
#   2 strata    collbench over STRATA_NET=verbs, -c 1 (#wrong must be 0), 8 B..1 GiB: sendrecv
#               (malloc buffers: bounce buffers), sendrecv --mem-alloc (strataMemAlloc:
#               zero-copy) and all_reduce; one node: -np 2 --nodes 2 (two emulated nodes, so the
#               bytes go through the transport and the HCA); two nodes: --rank/--nranks with
#               STRATA_COMM_ID, rank 0 here, rank 1 on the peer
#   3 ratios    strata's sendrecv busbw / ib_write_bw's per size >= 1 MiB, and strata's 8 B
#               sendrecv time - ib_write_lat's typical latency: printed as figures, never verdicts
#   4 faults    on this machine (two processes through its HCA, whatever the mode): a small
#               STRATA_IB_TIMEOUT and a SIGKILLed peer mid-all-reduce: the time until the
#               survivor's error and its line; a STRATA_IB_GID_INDEX past the port's GID table:
#               the error line
# Each step: PASS, FAIL or SKIP with a reason, and its time; a failing step never stops the run.
#
#   bench/verbs_check.sh [--dry-run] [--hca NAME[:PORT]] [--steps 0,1,...] [--budget S] OUT_DIR
#   bench/verbs_check.sh --peer HOST [--addr MYADDR] [options] OUT_DIR    (two nodes: this side)
#   bench/verbs_check.sh --serve HOST [options] OUT_DIR                   (two nodes: the peer)
# Two nodes: start `--serve HOST` on the peer first (HOST: the address the peer reaches this
# machine at, which is --addr here, by default the source address of this machine's route to the
# peer); it serves perftest and runs strata's rank 1 of every step-2 run, then waits for this side
# (until its budget is spent). Ports VERBS_CHECK_PORT (18650) .. +19, TCP, both machines.
# OUT_DIR receives verbs_check.json (one object: steps, measurements, summary), verbs_check.log
# (everything every command printed) and the raw outputs of each run.
# --dry-run: no HCA needed (CI): every host-side piece runs (arguments, folder, JSON, the probes
# that exist); when STRATA_IBVERBS_LIB names a stand-in libibverbs (tests/fakeverbs/), steps 2 and
# 4 run on it with tiny sizes, labelled "stand-in (dry run)": figures measured on it are never
# network performance; otherwise they are SKIPs with their reason; under a minute.
# Paths are relative to this script; COLLBENCH=PATH takes collbench from there instead.
# Packages: perftest (ib_write_bw, ib_write_lat), rdma-core / ibverbs-utils (ibv_devinfo),
# infiniband-diags (ibstat), iproute2 (rdma), all optional: what is missing is said.
# Exit: 0 when no step FAILed, 1 otherwise, 2 for bad arguments.
set -u -o pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$here/.." && pwd)

dry=0 out="" steps="0,1,2,3,4" budget=600 peer="" serve="" hca="" myaddr=""
usage() { sed -n '2,/^set -u/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; }
need() { [ -n "${2:-}" ] && [ "${2#-}" = "$2" ] || { echo "verbs_check: $1 needs $3" >&2; exit 2; }; }
while [ $# -gt 0 ]; do
    case $1 in
        --dry-run) dry=1; shift ;;
        --steps) need "$1" "${2:-}" "a list"; steps=$2; shift 2 ;;
        --budget) need "$1" "${2:-}" "seconds"; budget=$2; shift 2 ;;
        --peer) need "$1" "${2:-}" "a host"; peer=$2; shift 2 ;;
        --serve) need "$1" "${2:-}" "the address of the node that runs the check"; serve=$2; shift 2 ;;
        --addr) need "$1" "${2:-}" "an address"; myaddr=$2; shift 2 ;;
        --hca) need "$1" "${2:-}" "an HCA name"; hca=$2; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        -*) echo "verbs_check: unknown option $1 (--help)" >&2; exit 2 ;;
        *) [ -z "$out" ] || { echo "verbs_check: one output folder only ($out, $1)" >&2; exit 2; }
           out=$1; shift ;;
    esac
done
case $budget in ''|*[!0-9]*) echo "verbs_check: --budget '$budget' is not a number of seconds" >&2; exit 2 ;; esac
case ,$steps, in *[!0-4,]*|,,) echo "verbs_check: --steps '$steps' is not a list of 0..4" >&2; exit 2 ;; esac
[ -n "$peer" ] && [ -n "$serve" ] && { echo "verbs_check: --peer and --serve exclude each other" >&2; exit 2; }
[ "$dry" = 1 ] && { [ -n "$peer" ] || [ -n "$serve" ]; } && { echo "verbs_check: --dry-run runs on one machine (no --peer, --serve)" >&2; exit 2; }
case $hca in *[!A-Za-z0-9_.:-]*) echo "verbs_check: --hca '$hca' is not an HCA name (mlx5_0, mlx5_0:1)" >&2; exit 2 ;; esac
[ -n "$out" ] || { echo "verbs_check: give an output folder (--help)" >&2; exit 2; }
mkdir -p "$out" && [ -w "$out" ] || { echo "verbs_check: cannot write to $out" >&2; exit 2; }
out=$(cd "$out" && pwd)

build=$top
[ -n "${COLLBENCH:-}" ] && build=$(cd "$(dirname "$COLLBENCH")" && pwd)
collbench=${COLLBENCH:-$top/collbench}
export LD_LIBRARY_PATH="$top/.gpu_libs:$build/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
port0=${VERBS_CHECK_PORT:-18650}
# the transport under test; VERBS_CHECK_NET=ucx only to exercise this script where nothing else runs
net=${VERBS_CHECK_NET:-verbs}

json=$out/verbs_check.json
log=$out/verbs_check.log
: >"$log"
now() { date +%s.%N; }
t_start=$(now)
deadline=$(awk -v s="$t_start" -v b="$budget" 'BEGIN { printf "%.0f", s + b }')
left() { awk -v d="$deadline" -v n="$(now)" 'BEGIN { x = d - n; printf "%d", (x > 0) ? x : 0 }'; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.3f", b - a }'; }
say() { printf '%s\n' "$*" | tee -a "$log"; }

# ---- JSON ----
json_str() {
    local s
    s=$(printf '%s' "$1" | tr -d '\000-\010\013\014\016-\037')
    s=${s//\\/\\\\}; s=${s//\"/\\\"}; s=${s//$'\n'/\\n}; s=${s//$'\t'/\\t}; s=${s//$'\r'/}
    printf '"%s"' "$s"
}
json_num() {
    if printf '%s' "$1" | grep -Eq '^-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$'; then printf '%s' "$1"; else printf null; fi
}

# ---- steps ----
step_json=()
declare -A step_result
cur=-1 cur_name="" cur_t0=0 details=""
det() { details+="${details:+, }$(json_str "$1"): $2"; }
# the run's measurements, also in the JSON's top-level "measurements" (keys of a dry run start
# with standin_dry_run_)
measures=""
meas() { measures+="${measures:+, }$(json_str "$1"): $2"; }
dets() { det "$1" "$(json_str "$2")"; }
detn() { det "$1" "$(json_num "$2")"; }
step_on() { case ,$steps, in *,$1,*) return 0 ;; esac; return 1; }
begin() {
    cur=$1 cur_name=$2 details="" cur_t0=$(now)
    say ""
    say "=== step $cur: $cur_name ($(left) s of the budget left)"
}
end() { # result reason
    local sec
    sec=$(awk -v a="$cur_t0" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }')
    step_result[$cur]=$1
    step_json+=("{\"step\": $cur, \"name\": $(json_str "$cur_name"), \"result\": \"$1\", \"reason\": $(json_str "$2"), \"seconds\": $sec, \"details\": {$details}}")
    say "$(printf '%-4s step %d %-9s %6s s  %s' "$1" "$cur" "$cur_name" "$sec" "$2")"
}

# run MAX FILE CMD...: bounded by the budget, output into FILE and the log; 124: out of time,
# 125: not run (the budget was spent)
run() {
    local max=$1 file=$2 lim rc cmd
    shift 2
    lim=$(left); [ "$lim" -gt "$max" ] && lim=$max
    if [ "$lim" -lt 5 ]; then
        say "not run, the budget is spent: $*" | tee "$file" >/dev/null
        return 125
    fi
    cmd="$*"; cmd=${cmd//$'\n'/ }
    [ ${#cmd} -gt 240 ] && cmd="${cmd:0:220} ..."
    say "\$ ${cmd#"$build"/} (limit ${lim} s)"
    timeout -k 10 "$lim" "$@" >"$file" 2>&1; rc=$?
    cat "$file" >>"$log"
    [ "$rc" = 124 ] && say "(stopped after $lim s)"
    return "$rc"
}

# processes this script started in the background, stopped on exit
bg_pids=()
fabric_tag=""
cleanup() {
    local p
    for p in "${bg_pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
    [ -n "$fabric_tag" ] && rm -f /dev/shm/fakeverbs-"$fabric_tag"* 2>/dev/null
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- the library the transport loads ----
standin=0
if [ -n "${STRATA_IBVERBS_LIB:-}" ]; then
    case ${STRATA_IBVERBS_LIB##*/} in
        *fake*|*stand*|*mock*) standin=1 ;;
    esac
    case $STRATA_IBVERBS_LIB in */tests/fakeverbs/*) standin=1 ;; esac
fi
if [ "$standin" = 1 ]; then
    # a fabric of the stand-in's own for this run, removed at exit
    fabric_tag=${FAKEVERBS_FABRIC:-strata-vcheck.$$}
    export FAKEVERBS_FABRIC=$fabric_tag
fi
label=hardware
[ "$dry" = 1 ] && label="stand-in (dry run)"
[ "$dry" = 1 ] && [ "$net" != verbs ] && label="$net, not verbs (dry run of the script itself)"
mode=hardware; [ "$dry" = 1 ] && mode=dry-run
layout=one-node; [ -n "$peer" ] && layout=two-nodes; [ -n "$serve" ] && layout=serve
# measurement keys of a dry run say what they are, so that nothing reading the JSON takes them
# for a network's
mk=""; [ "$dry" = 1 ] && mk="standin_dry_run_"

# the dry run needs the stand-in for anything that touches the transport
dry_why=""
if [ "$dry" = 1 ] && [ "$standin" = 0 ] && [ "$net" = verbs ]; then
    if [ -n "${STRATA_IBVERBS_LIB:-}" ]; then
        dry_why="dry run: STRATA_IBVERBS_LIB=$STRATA_IBVERBS_LIB is not a stand-in (tests/fakeverbs/libibverbs.so.1); a dry run never opens a real HCA"
    else
        dry_why="dry run: STRATA_IBVERBS_LIB does not name a stand-in libibverbs (tests/fakeverbs/libibverbs.so.1 once built)"
    fi
fi
if [ "$dry" = 1 ] && [ -n "${STRATA_IBVERBS_LIB:-}" ] && [ ! -r "$STRATA_IBVERBS_LIB" ] && [ -z "$dry_why" ]; then
    dry_why="dry run: STRATA_IBVERBS_LIB=$STRATA_IBVERBS_LIB does not exist"
fi

say "# verbs_check: $mode, $layout$([ -n "$peer" ] && echo " (peer $peer)")$([ -n "$serve" ] && echo " (serving $serve)"), output in $out, budget $budget s, steps $steps"
say "# rerun with: cd $(printf '%q' "$PWD") && $(printf '%q' "$0")$([ "$dry" = 1 ] && echo " --dry-run")$([ -n "$peer" ] && echo " --peer $peer")$([ -n "$serve" ] && echo " --serve $serve")$([ -n "$hca" ] && echo " --hca $hca") --steps $steps --budget $budget $(printf '%q' "$out")"
[ "$dry" = 1 ] && say "# STRATA_IBVERBS_LIB=${STRATA_IBVERBS_LIB:-(unset)}$([ "$standin" = 1 ] && echo " (stand-in: nothing measured on it is network performance)")"

# ---- helpers: HCA ports, perftest, collbench ----
# ACTIVE ports as "name:port link_layer" lines, from ibv_devinfo
active_ports() {
    awk '/^hca_id:/ { dev = $2 } /^[ \t]+port:/ { port = $2 }
         /state:/ && /PORT_ACTIVE/ { act[dev ":" port] = 1 }
         /link_layer:/ { if (act[dev ":" port]) print dev ":" port, $2 }' "$1" 2>/dev/null
}
# rows of a collbench table: size time_oop algbw busbw wrong_oop time_ip algbw busbw wrong_ip
cb_rows() { awk '$1 ~ /^[0-9]+$/ && NF >= 12 { print $1, $(NF-7), $(NF-6), $(NF-5), $(NF-4), $(NF-3), $(NF-2), $(NF-1), $NF }' "$1"; }
cb_wrong() { cb_rows "$1" | awk '{ w += $5 + $9 } END { print w + 0 }'; }
cb_nrows() { cb_rows "$1" | wc -l; }
# the strata error lines of a run's output (the transport's and collbench's)
err_line() { grep -E 'ERROR|WARN (VERBS|INIT|COLL)|failed|error' "$1" 2>/dev/null | grep -v '^#' | head -"${2:-1}"; }

# The HCA and GID index: --hca, else the transport's choice (step 0), else the first ACTIVE port.
chosen_hca="" chosen_gid="" link_layer=""
strata_env=(STRATA_NET="$net")
[ -n "$hca" ] && strata_env+=(STRATA_IB_HCA="=$hca")

# collbench on this machine as two nodes (the transport between the ranks), or as rank R of two
# with STRATA_COMM_ID
cb_local=(env "${strata_env[@]}" "$collbench" -np 2 --nodes 2)
cb_rank() { # rank addr:port: the command's start into cb_cmd
    cb_cmd=(env "${strata_env[@]}" STRATA_COMM_ID="$2" STRATA_BOOTSTRAP_TIMEOUT="$(left)s"
            "$collbench" --rank "$1" --nranks 2)
}

# this machine's address towards the peer (two nodes)
if [ -n "$peer" ] && [ -z "$myaddr" ]; then
    myaddr=$(ip route get "$(getent ahostsv4 "$peer" 2>/dev/null | awk 'NR == 1 { print $1 }')" 2>/dev/null |
             sed -n 's/.* src \([0-9.]*\).*/\1/p' | head -1)
    [ -n "$myaddr" ] || myaddr=$(hostname -I 2>/dev/null | awk '{ print $1 }')
fi

# step 2's runs: name, collective, options (the same list on both nodes)
if [ "$dry" = 1 ]; then
    sz=(-b 8 -e 64K -f 8 -n 2 -w 1)
else
    sz=(-b 8 -e 1G -f 2 -n 20 -w 5)
fi
runs2=("sendrecv|sendrecv|" "sendrecv_memalloc|sendrecv|--mem-alloc" "all_reduce|all_reduce|")
perf_args() { # bw|lat: perftest's options for the chosen HCA
    local a=(-a -F)
    [ "$1" = bw ] && a+=(--report_gbits)
    [ -n "$chosen_hca" ] && a+=(-d "${chosen_hca%%:*}") && case $chosen_hca in *:*) a+=(-i "${chosen_hca##*:}") ;; esac
    [ "$link_layer" = Ethernet ] && [ -n "$chosen_gid" ] && a+=(-x "$chosen_gid")
    printf '%s\n' "${a[@]}"
}

# ---- 0: environment ----
env_step() {
    local probs=() f ports n
    begin 0 env
    dets uname "$(uname -srm)"
    dets hostname "$(hostname 2>/dev/null)"
    dets date "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    dets tree "$(git -C "$top" describe --always --dirty 2>/dev/null || echo unknown)"
    dets ulimit_l "$(ulimit -l)"
    dets rdma_core "$( (dpkg-query -W -f='${Package} ${Version}\n' rdma-core libibverbs1 2>/dev/null ||
                        rpm -q rdma-core libibverbs 2>/dev/null) | tr '\n' ' ')"
    dets ibverbs_lib "${STRATA_IBVERBS_LIB:-libibverbs.so.1}"
    [ -d /sys/class/infiniband ] && dets sys_class_infiniband "$(ls /sys/class/infiniband | tr '\n' ' ')" ||
        dets sys_class_infiniband "absent"
    if [ -x "$collbench" ]; then
        missing=$(ldd "$collbench" 2>/dev/null | awk '/not found/ {print $1}' | tr '\n' ' ')
        dets "binary collbench" "${missing:+missing: $missing}${missing:-ok}"
        [ -n "$missing" ] && probs+=("collbench lacks $missing")
        env STRATA_NET=verbs "$collbench" --print-config 2>/dev/null | grep -E '^STRATA_(IB|IBVERBS|NET)' >"$out/config.txt"
        dets verbs_parameters "$(tr '\n' ' ' <"$out/config.txt")"
    else
        dets "binary collbench" "not built"
        probs+=("collbench is not built ($collbench)")
    fi
    # the HCAs as the system sees them
    f=$out/ibv_devinfo.txt
    if command -v ibv_devinfo >/dev/null; then
        run 30 "$f" ibv_devinfo -v
        ports=$(active_ports "$f")
        dets active_ports "$(echo "$ports" | tr '\n' ';' | sed 's/;$//')"
        n=$(echo "$ports" | grep -c .)
        detn active_port_count "$n"
        [ "$n" = 0 ] && [ "$dry" = 0 ] && probs+=("no ACTIVE HCA port (ibv_devinfo: $(grep -m1 -iE 'no .*device|error|state' "$f" | tr -s ' '))")
    elif command -v ibv_devices >/dev/null; then
        run 30 "$f" ibv_devices
        dets ibv_devices "$(tail -n +3 "$f" | awk '{print $1}' | tr '\n' ' ')"
        [ "$dry" = 0 ] && probs+=("no ibv_devinfo (apt-get install ibverbs-utils): ports not checked")
    else
        dets ibv_devinfo "absent (apt-get install ibverbs-utils)"
        [ "$dry" = 0 ] && probs+=("no ibv_devinfo nor ibv_devices (apt-get install ibverbs-utils)")
    fi
    if command -v ibstat >/dev/null; then run 30 "$out/ibstat.txt" ibstat; dets ibstat "$out/ibstat.txt";
    else dets ibstat "absent (apt-get install infiniband-diags)"; fi
    if command -v rdma >/dev/null; then
        run 30 "$out/rdma_link.txt" rdma link
        dets rdma_link "$(tr '\n' ';' <"$out/rdma_link.txt" | cut -c1-400)"
    else dets rdma_link "absent (iproute2)"; fi
    if command -v show_gids >/dev/null; then
        run 30 "$out/show_gids.txt" show_gids
        dets show_gids "$(grep -cE '^[a-z]' "$out/show_gids.txt") lines in show_gids.txt"
    else dets show_gids "absent (MLNX_OFED's show_gids)"; fi
    # the transport's view
    if [ -x "$collbench" ] && [ -z "$dry_why" ]; then
        f=$out/step0_transport.txt
        run 60 "$f" env "${strata_env[@]}" STRATA_DEBUG=INFO STRATA_DEBUG_SUBSYS=VERBS,INIT \
            "$collbench" all_reduce -np 2 -b 8 -e 8 -n 1; rc=$?
        detn transport_view_status "$rc"
        dets transport_view "$(grep -E 'VERBS|via ' "$f" | head -6 | tr '\n' ' ')"
        # the HCA port, link layer, LID and GID index each context uses are said at INFO
        line=$(grep -m1 -E 'rank 0: verbs on [^ ]+:[0-9]+ \((IB|RoCE), LID' "$out/step0_transport.txt")
        if [ -n "$line" ]; then
            chosen_hca=$(echo "$line" | sed -n 's/.*rank 0: verbs on \([^ ]*:[0-9]*\) (.*/\1/p')
            chosen_gid=$(echo "$line" | sed -n 's/.*GID index \([0-9]*\).*/\1/p')
            case $line in *"(RoCE,"*) link_layer=Ethernet ;; *) link_layer=InfiniBand ;; esac
            dets chosen "$line"
        elif [ "$rc" != 0 ] && [ "$dry" = 0 ] && [ "$net" = verbs ]; then
            probs+=("the transport did not open: $(grep -m1 -E 'verbs not used|ERROR|no usable' "$out/step0_transport.txt")")
        fi
    elif [ -n "$dry_why" ]; then
        dets transport_view "not run: $dry_why"
    fi
    # --hca over the transport's choice; else the first ACTIVE port of ibv_devinfo
    if [ -n "$hca" ]; then
        case $hca in *:*) chosen_hca=$hca ;; *) chosen_hca=$hca:1 ;; esac
    fi
    if [ -z "$chosen_hca" ] && [ -s "$out/ibv_devinfo.txt" ]; then
        chosen_hca=$(active_ports "$out/ibv_devinfo.txt" | awk 'NR == 1 { print $1 }')
    fi
    if [ -z "$link_layer" ] && [ -n "$chosen_hca" ] && [ -s "$out/ibv_devinfo.txt" ]; then
        link_layer=$(active_ports "$out/ibv_devinfo.txt" | awk -v p="$chosen_hca" '$1 == p { print $2 }')
    fi
    dets hca "${chosen_hca:-none}"
    dets link_layer "${link_layer:-unknown}"
    dets gid_index "${chosen_gid:-unknown}"
    meas hca "$(json_str "$chosen_hca")"; meas link_layer "$(json_str "$link_layer")"; meas gid_index "$(json_num "$chosen_gid")"
    if [ -n "$chosen_hca" ] && [ -r "/sys/class/infiniband/${chosen_hca%%:*}/ports/${chosen_hca##*:}/gids/0" ]; then
        g=/sys/class/infiniband/${chosen_hca%%:*}/ports/${chosen_hca##*:}
        dets gids "$(for i in 0 1 2 3 4 5 6 7; do v=$(cat "$g/gids/$i" 2>/dev/null) || break
                     t=$(cat "$g/gid_attrs/types/$i" 2>/dev/null); echo "$i $v ${t:-}"; done | tr '\n' ';')"
    fi
    if [ ${#probs[@]} -gt 0 ]; then
        end FAIL "$(IFS=';'; echo "${probs[*]}")"
    elif [ "$dry" = 1 ]; then
        end PASS "dry run: host probes only$([ "$standin" = 1 ] && echo "; the transport opened ${chosen_hca:-no port} of the stand-in")"
    else
        end PASS "HCA ${chosen_hca:-?} (${link_layer:-?}, GID index ${chosen_gid:-?}), memlock $(ulimit -l)"
    fi
}

# ---- 1: perftest ----
bw_rows="" lat8=""
perftest_step() {
    local a_bw a_lat rc1 rc2 probs=() srv
    begin 1 perftest
    if [ "$dry" = 1 ]; then end SKIP "dry run: perftest needs an HCA"; return; fi
    if ! command -v ib_write_bw >/dev/null || ! command -v ib_write_lat >/dev/null; then
        end SKIP "perftest is not installed (apt-get install perftest)"; return
    fi
    mapfile -t a_bw < <(perf_args bw)
    mapfile -t a_lat < <(perf_args lat)
    dets hca "${chosen_hca:-default}"
    if [ -n "$peer" ]; then
        sleep 1
        run 120 "$out/step1_write_bw.txt" ib_write_bw "${a_bw[@]}" -p "$port0" "$peer"; rc1=$?
        sleep 1
        run 120 "$out/step1_write_lat.txt" ib_write_lat "${a_lat[@]}" -p $((port0 + 1)) "$peer"; rc2=$?
    else
        ib_write_bw "${a_bw[@]}" -p "$port0" >"$out/step1_write_bw_server.txt" 2>&1 & srv=$!; bg_pids+=("$srv")
        sleep 1
        run 120 "$out/step1_write_bw.txt" ib_write_bw "${a_bw[@]}" -p "$port0" localhost; rc1=$?
        kill "$srv" 2>/dev/null; wait "$srv" 2>/dev/null
        ib_write_lat "${a_lat[@]}" -p $((port0 + 1)) >"$out/step1_write_lat_server.txt" 2>&1 & srv=$!; bg_pids+=("$srv")
        sleep 1
        run 120 "$out/step1_write_lat.txt" ib_write_lat "${a_lat[@]}" -p $((port0 + 1)) localhost; rc2=$?
        kill "$srv" 2>/dev/null; wait "$srv" 2>/dev/null
    fi
    # ib_write_bw: #bytes #iterations BW_peak BW_average MsgRate (Gb/s)
    bw_rows=$(awk '$1 ~ /^[0-9]+$/ && NF >= 5 { print $1, $4 }' "$out/step1_write_bw.txt")
    # ib_write_lat: #bytes #iterations t_min t_max t_typical t_avg t_stdev p99 p99.9 (us)
    lat8=$(awk '$1 == 8 && NF >= 7 { print $5; exit }' "$out/step1_write_lat.txt")
    det ib_write_bw_Gbps "{$(echo "$bw_rows" | awk 'NF == 2 { printf "%s\"%s\": %s", (c++ ? ", " : ""), $1, $2 }')}"
    detn ib_write_lat_8B_typical_us "$lat8"
    meas ib_write_bw_Gbps_largest "$(json_num "$(echo "$bw_rows" | tail -1 | awk '{ print $2 }')")"
    meas ib_write_lat_8B_us "$(json_num "$lat8")"
    dets peer "${peer:-localhost (loopback through the HCA)}"
    [ "$rc1" = 0 ] && [ -n "$bw_rows" ] || probs+=("ib_write_bw: status $rc1: $(tail -2 "$out/step1_write_bw.txt" | tr '\n' ' ')")
    [ "$rc2" = 0 ] && [ -n "$lat8" ] || probs+=("ib_write_lat: status $rc2: $(tail -2 "$out/step1_write_lat.txt" | tr '\n' ' ')")
    if [ ${#probs[@]} -gt 0 ]; then end FAIL "$(IFS=';'; echo "${probs[*]}")"
    else end PASS "ib_write_bw $(echo "$bw_rows" | tail -1 | awk '{ print $2 }') Gb/s at $(echo "$bw_rows" | tail -1 | awk '{ print $1 }') B, ib_write_lat ${lat8} us at 8 B"; fi
}

# ---- 2: strata over verbs ----
declare -A cb_file
strata_step() {
    local fails=() notrun=() runs="" e name coll opt f rc w n extra
    begin 2 strata
    dets transport "$net"
    dets label "$label"
    if [ ! -x "$collbench" ]; then end FAIL "collbench is not built"; return; fi
    if [ -n "$dry_why" ]; then end SKIP "$dry_why"; return; fi
    k=2
    for e in "${runs2[@]}"; do
        IFS='|' read -r name coll opt <<<"$e"
        extra=(); [ -n "$opt" ] && extra=("$opt")
        f=$out/step2_$name.txt
        if [ -n "$peer" ]; then
            cb_rank 0 "$myaddr:$((port0 + k))"
            run 300 "$f" "${cb_cmd[@]}" "$coll" "${extra[@]}" "${sz[@]}" -c 1 -T 300; rc=$?
        else
            run 300 "$f" "${cb_local[@]}" "$coll" "${extra[@]}" "${sz[@]}" -c 1 -T 300; rc=$?
        fi
        k=$((k + 1))
        cb_file[$name]=$f
        w=$(cb_wrong "$f") n=$(cb_nrows "$f")
        meas "${mk}${name}_busbw_GBps_largest" "$(json_num "$(cb_rows "$f" | tail -1 | awk '{ print $4 }')")"
        meas "${mk}${name}_8B_us" "$(json_num "$(cb_rows "$f" | awk '$1 == 8 { print $2; exit }')")"
        meas "${name}_wrong" "$(json_num "$w")"
        runs+="${runs:+, }{\"run\": $(json_str "$name"), \"status\": $rc, \"rows\": $n, \"wrong\": $w, \"${mk}busbw_GBps\": {$(cb_rows "$f" | awk '{ printf "%s\"%s\": %s", (c++ ? ", " : ""), $1, $4 }')}, \"${mk}time_us\": {$(cb_rows "$f" | awk '{ printf "%s\"%s\": %s", (c++ ? ", " : ""), $1, $2 }')}}"
        if [ "$rc" = 125 ]; then
            notrun+=("$name")
        elif [ "$rc" != 0 ] || [ "$n" = 0 ] || [ "$w" != 0 ]; then
            fails+=("$name: status $rc, $n rows, #wrong $w$([ "$rc" != 0 ] && printf ': %s' "$(err_line "$f" 2 | tr '\n' ' ')")")
            say "     FAIL $name: status $rc, $n rows, #wrong $w"
        else
            say "     ok   $name: $n rows, #wrong 0"
        fi
    done
    det runs "[$runs]"
    dets layout "$([ -n "$peer" ] && echo "two nodes: rank 0 here, rank 1 on $peer" || echo "one node: -np 2 --nodes 2, loopback through the HCA")"
    if [ ${#fails[@]} -gt 0 ]; then
        end FAIL "$(IFS=';'; echo "${fails[*]}")"
    elif [ ${#notrun[@]} -gt 0 ]; then
        end SKIP "the budget was spent before $(IFS=';'; echo "${notrun[*]}")"
    elif [ "$dry" = 1 ]; then
        end PASS "$label: ${#runs2[@]} collbench runs over $net, #wrong 0 (figures are the stand-in's, never network performance)"
    else
        end PASS "${#runs2[@]} collbench runs over $net on ${chosen_hca:-the default HCA}, #wrong 0"
    fi
}

# ---- 3: ratios ----
ratio_step() {
    local name f r rows=""
    begin 3 ratios
    if [ "$dry" = 1 ]; then end SKIP "dry run: no HCA, nothing to compare (stand-in figures are never network performance)"; return; fi
    if [ -z "$bw_rows" ]; then end SKIP "no ib_write_bw figures (step 1: ${step_result[1]:-not run})"; return; fi
    for name in sendrecv sendrecv_memalloc; do
        f=${cb_file[$name]:-}
        [ -n "$f" ] && [ -s "$f" ] || continue
        # ib_write_bw's Gb/s -> GB/s; strata's sendrecv busbw (GB/s), per size >= 1 MiB
        r=$(cb_rows "$f" | awk -v bw="$bw_rows" '
            BEGIN { n = split(bw, l, "\n"); for (i = 1; i <= n; i++) { split(l[i], x, " "); ref[x[1]] = x[2] / 8 } }
            $1 >= 1048576 && ($1 in ref) && ref[$1] > 0 { printf "%s\"%s\": %.3f", (c++ ? ", " : ""), $1, $4 / ref[$1] }')
        det "${name}_busbw_of_ib_write_bw" "{$r}"
        meas "${name}_busbw_of_ib_write_bw" "{$r}"
        rows+=" $name:$(echo "$r" | tr -d '"' | awk -F', ' '{ print $NF }')"
        say "  $name busbw / ib_write_bw per size >= 1 MiB: {$r}"
    done
    lat_s=$(cb_rows "${cb_file[sendrecv]:-/dev/null}" | awk '$1 == 8 { print $2; exit }')
    d=$(awk -v a="$lat_s" -v b="$lat8" 'BEGIN { if (a == "" || b == "") print ""; else printf "%.2f", a - b }')
    detn sendrecv_8B_us "$lat_s"
    detn ib_write_lat_8B_us "$lat8"
    detn sendrecv_8B_minus_ib_write_lat_us "$d"
    meas sendrecv_8B_minus_ib_write_lat_us "$(json_num "$d")"
    dets note "figures, not verdicts: VERBS.md §4.5 guesses >= 0.90-0.95 of ib_write_bw at >= 1 MiB and within ~1 us of ib_write_lat; collbench's sendrecv time is a whole strata call (one send and one receive per rank, synchronized), ib_write_lat's half a round trip"
    say "  8 B: strata sendrecv ${lat_s:-?} us - ib_write_lat ${lat8:-?} us = ${d:-?} us"
    end PASS "ratios computed (last sizes:${rows:- none}); figures, not verdicts"
}

# ---- 4: faults ----
faults_step() {
    local probs=() f0 f1 p0 p1 t_kill t_err rc line bad
    begin 4 faults
    dets label "$label"
    if [ ! -x "$collbench" ]; then end FAIL "collbench is not built"; return; fi
    if [ -n "$dry_why" ]; then end SKIP "$dry_why"; return; fi
    # a) a small IB timeout and a SIGKILLed peer mid-all-reduce: two processes of this machine
    f0=$out/step4_kill_rank0.txt f1=$out/step4_kill_rank1.txt
    local id=127.0.0.1:$((port0 + 10)) tmo=10
    [ "$dry" = 1 ] && export FAKEVERBS_TIME_SCALE=${FAKEVERBS_TIME_SCALE:-0.01}
    say "\$ STRATA_IB_TIMEOUT=$tmo STRATA_TIMEOUT=60 collbench all_reduce --rank 0|1 --nranks 2 -b 16M -e 16M -n 1000000 (rank 1 SIGKILLed)"
    for r in 0 1; do
        env "${strata_env[@]}" STRATA_IB_TIMEOUT=$tmo STRATA_TIMEOUT=60 STRATA_COMM_ID=$id \
            STRATA_HOSTID=vcheck-node$r STRATA_BOOTSTRAP_TIMEOUT=30s \
            "$collbench" all_reduce --rank $r --nranks 2 -b 16M -e 16M -n 1000000 -w 2 -c 0 -T 90 \
            >"$out/step4_kill_rank$r.txt" 2>&1 &
        eval "p$r=\$!"; bg_pids+=("$!")
    done
    # in the timed loop: rank 0 printed the table's header, then one more second
    for _ in $(seq 300); do
        grep -q 'Collective test starting' "$f0" 2>/dev/null && break
        kill -0 "$p0" 2>/dev/null || break
        sleep 0.1
    done
    sleep 1
    if ! kill -0 "$p0" 2>/dev/null || ! kill -0 "$p1" 2>/dev/null; then
        wait "$p0" 2>/dev/null; wait "$p1" 2>/dev/null
        cat "$f0" "$f1" >>"$log"
        probs+=("kill: the ranks ended before the kill: $(err_line "$f0" 1)$(err_line "$f1" 1)")
    else
        t_kill=$(now)
        kill -KILL "$p1"
        t_err=""
        for _ in $(seq 6000); do
            kill -0 "$p0" 2>/dev/null || { t_err=$(since "$t_kill"); break; }
            sleep 0.01
        done
        { wait "$p0"; } 2>/dev/null; rc=$?
        { wait "$p1"; } 2>/dev/null
        cat "$f0" >>"$log"
        line=$(err_line "$f0" 1)
        detn "${mk}kill_survivor_exit_s" "$t_err"
        meas "${mk}kill_survivor_exit_s" "$(json_num "$t_err")"
        detn kill_survivor_status "$rc"
        dets kill_survivor_error "$line"
        dets kill_note "STRATA_IB_TIMEOUT=$tmo (4.096 us x 2^$tmo x (retry+1) on hardware$([ "$dry" = 1 ] && echo ", x FAKEVERBS_TIME_SCALE=$FAKEVERBS_TIME_SCALE on the stand-in")); time from SIGKILL to the survivor's exit (its error comes first); both ranks on this machine"
        say "     survivor (rank 0): status $rc after ${t_err:-more than 60} s: ${line:-no error line}"
        if [ -z "$t_err" ]; then probs+=("kill: the survivor was still running 60 s after its peer's SIGKILL")
        elif [ "$rc" = 0 ]; then probs+=("kill: the survivor exited 0 after its peer's SIGKILL")
        elif [ -z "$line" ]; then probs+=("kill: the survivor exited ($rc) with no error line")
        fi
    fi
    # b) a GID index past the port's table: the error line
    bad=${VERBS_CHECK_BAD_GID:-255}
    f0=$out/step4_gid.txt
    run 60 "$f0" env STRATA_IB_GID_INDEX="$bad" STRATA_BOOTSTRAP_TIMEOUT=20s STRATA_CONNECT_TIMEOUT=10s \
        "${strata_env[@]}" "$collbench" -np 2 --nodes 2 all_reduce -b 8 -e 8 -n 1 -w 0 -T 60; rc=$?
    line=$(grep -m1 -E 'GID' "$f0")
    [ -n "$line" ] || line=$(err_line "$f0" 1)
    detn gid_status "$rc"
    dets gid_error "$line"
    dets gid_note "STRATA_IB_GID_INDEX=$bad; link layer ${link_layer:-unknown}$([ "$link_layer" != Ethernet ] && echo " (the index matters on RoCE; on InfiniBand this only checks the error path)")"
    say "     STRATA_IB_GID_INDEX=$bad: status $rc: ${line:-no error line}"
    if [ "$net" = verbs ]; then
        if [ "$rc" = 0 ]; then probs+=("STRATA_IB_GID_INDEX=$bad: the run succeeded")
        elif ! grep -q 'GID' <<<"$line"; then probs+=("STRATA_IB_GID_INDEX=$bad: the error does not name the GID: $line")
        fi
    fi
    if [ ${#probs[@]} -gt 0 ]; then end FAIL "$(IFS=';'; echo "${probs[*]}")"
    else end PASS "$label: survivor's error ${t_err:-?} s after its peer's SIGKILL; a bad GID index is named"; fi
}

# ---- the peer of a two-node check ----
if [ -n "$serve" ]; then
    begin 1 serve
    mapfile -t a_bw < <(perf_args bw)
    mapfile -t a_lat < <(perf_args lat)
    pids=()
    if step_on 1 && command -v ib_write_bw >/dev/null; then
        ib_write_bw "${a_bw[@]}" -p "$port0" >"$out/serve_write_bw.txt" 2>&1 & pids+=($!)
        ib_write_lat "${a_lat[@]}" -p $((port0 + 1)) >"$out/serve_write_lat.txt" 2>&1 & pids+=($!)
    fi
    if step_on 2; then
        k=2
        for e in "${runs2[@]}"; do
            IFS='|' read -r name coll opt <<<"$e"
            extra=(); [ -n "$opt" ] && extra=("$opt")
            timeout -k 10 "$budget" env "${strata_env[@]}" STRATA_COMM_ID="$serve:$((port0 + k))" \
                STRATA_BOOTSTRAP_TIMEOUT="${budget}s" "$collbench" --rank 1 --nranks 2 "$coll" \
                "${extra[@]}" "${sz[@]}" -c 1 -T 300 >"$out/serve_$name.txt" 2>&1 & pids+=($!)
            k=$((k + 1))
        done
    fi
    bg_pids+=("${pids[@]}")
    say "serving ${#pids[@]} runs for $serve (perftest ports $port0-$((port0 + 1)), strata $serve:$((port0 + 2))..); at most $budget s"
    st=0
    for p in "${pids[@]}"; do wait "$p" || st=1; done
    cat "$out"/serve_*.txt >>"$log" 2>/dev/null
    dets outputs "$(ls "$out" | grep '^serve_' | tr '\n' ' ')"
    [ "$st" = 0 ] && end PASS "every served run ended well" || end FAIL "a served run failed: see $out/serve_*.txt"
else
    [ "$dry" = 1 ] && [ -n "$dry_why" ] && say "# $dry_why: steps 2 and 4 are SKIPs"
    step_on 0 && env_step
    # without step 0, the HCA from --hca
    if ! step_on 0 && [ -n "$hca" ]; then case $hca in *:*) chosen_hca=$hca ;; *) chosen_hca=$hca:1 ;; esac; fi
    step_on 1 && perftest_step
    step_on 2 && strata_step
    step_on 3 && ratio_step
    step_on 4 && faults_step
fi

# ---- the JSON ----
npass=0 nfail=0 nskip=0
for k in "${!step_result[@]}"; do
    case ${step_result[$k]} in PASS) npass=$((npass + 1)) ;; FAIL) nfail=$((nfail + 1)) ;; *) nskip=$((nskip + 1)) ;; esac
done
total=$(awk -v a="$t_start" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }')
note="figures of steps 1-3 are measured on ${chosen_hca:-no HCA}; ratios are figures, never the verdict"
[ "$dry" = 1 ] && note="dry run: nothing was measured on an HCA$([ "$standin" = 1 ] && echo "; the stand-in libibverbs's figures (keys standin_dry_run_*) are never network performance")"
{
    printf '{"script": "bench/verbs_check.sh", "mode": "%s", "layout": "%s", "label": %s, "transport": %s, "ibverbs_lib": %s, "hca": %s, "peer": %s, "budget_seconds": %s, "total_seconds": %s, "note": %s,\n' \
        "$mode" "$layout" "$(json_str "$label")" "$(json_str "$net")" "$(json_str "${STRATA_IBVERBS_LIB:-libibverbs.so.1}")" \
        "$(json_str "$chosen_hca")" "$(json_str "${peer:-$serve}")" "$budget" "$total" "$(json_str "$note")"
    printf ' "steps": [\n  %s\n ],\n' "$(IFS=$'\n'; echo "${step_json[*]}" | sed '2,$s/^/, /')"
    printf ' "measurements": {%s},\n' "$measures"
    printf ' "summary": {"pass": %d, "fail": %d, "skip": %d}}\n' "$npass" "$nfail" "$nskip"
} >"$json"
if command -v python3 >/dev/null && ! python3 -m json.tool "$json" >/dev/null 2>"$out/json_error.txt"; then
    say "verbs_check: the JSON does not parse: $(cat "$out/json_error.txt")"
    nfail=$((nfail + 1))
fi
[ -s "$out/json_error.txt" ] || rm -f "$out/json_error.txt"
say ""
say "verbs_check: $npass PASS, $nfail FAIL, $nskip SKIP in $total s; $json, $log"
[ "$nfail" = 0 ]
