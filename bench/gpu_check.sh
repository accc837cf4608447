#!/bin/bash
# gpu_check.sh: the GPU check of strata's device path (issue 18), one
# prepared run of at most 8 minutes on a GPU machine (one H200 here, several ranks sharing it):
#   0 env          nvidia-smi (compute mode must be Default, MIG off, clocks, ECC), driver,
#                  uname -r, the binaries' libraries, CUDA attributes (tests/gpu/dev_probe
#                  --quick), torch / NCCL versions and the nccl symbols libtorch_cuda imports
#   1 copy_bw      the device copy bandwidth, the physical anchor       \
#   2 kernel_exact reduction kernels byte for byte against the host:     | one run of
#                  dtypes x ops x sources x alignments x counts          | tests/gpu/dev_probe,
#   3 kernel_bw    kernel bandwidth, 2/4/8 sources of int8/bf16/fp32    | its JSON folded in
#   4 ipc          shareable memory exported to another process         /
#   5 collectives  collbench --device cuda, 2, 4 and 8 ranks on the GPU: all five collectives,
#                  in and out of place, -c 1 (#wrong must be 0); every checked call is ordered by
#                  the stream alone (producer kernel -> collective -> consumer kernel, one
#                  stream_sync); every dtype x op at 4 ranks; examples/nccl_port
#   6 performance  all-reduce busbw 4 B..1 GiB at 2, 4, 8 ranks; the HBM traffic the algorithm
#                  moves as a fraction of the copy anchor (copy path: (5m+1)S bytes per all-reduce
#                  of S bytes per rank over m ranks); 8-byte all-reduce latency, 2 ranks
#   7 nccl_shim    torch's "nccl" backend on strata's NCCL shim (src/shim/.libs/libnccl.so.2,
#                  LD_PRELOAD): two ranks on the GPU, dist.all_reduce of a CUDA tensor, the value
#                  checked; /proc/self/maps must show libnccl.so.2 mapped from the shim's folder
#                  (none from nvidia's wheel) and dladdr of ncclAllReduce must name the shim; also
#                  that the shim exports every nccl symbol libtorch_cuda imports (dry run: those
#                  host checks, the torch run a SKIP)
# Each step: PASS, FAIL or SKIP with a reason, and its time; a failing step never stops the run.
# The issue's targets are printed as ratios (measured / target), never as the run's verdict.
#
#   bench/gpu_check.sh [--dry-run] [--steps 0,1,...] [--budget S] OUT_DIR
#   bench/gpu_check.sh --bundle          copy the shared libraries the binaries need (UCX, hwloc,
#                                        jansson, cudart, libstrata) into .gpu_libs/ at the top of
#                                        the tree, for a machine without them
# OUT_DIR receives gpu_check.json (one object: steps, targets, summary) and gpu_check.log
# (everything every command printed), and the raw outputs of each run.
# --dry-run: no GPU needed (CI): every host-side step runs (arguments, folder, JSON, the probes
# that exist; collbench on the simulated device with tiny sizes where step 5 and 6 use cuda,
# labelled "sim (dry run)"), the GPU steps are SKIPs with their reason; under a minute.
# Paths are relative to this script, so a copy of the built tree carried to another machine runs
# as it is (with .gpu_libs/ when that machine lacks the libraries); COLLBENCH=PATH takes the
# binaries from that collbench's build folder instead (make check sets it).
# Exit: 0 when no step FAILed, 1 otherwise, 2 for bad arguments.
set -u -o pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$here/.." && pwd)

dry=0 out="" steps="0,1,2,3,4,5,6,7" budget=480 bundle=0
usage() { sed -n '2,/^set -u/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
    case $1 in
        --dry-run) dry=1; shift ;;
        --steps) steps=${2:-}; shift 2 || { echo "gpu_check: --steps needs a list" >&2; exit 2; } ;;
        --budget) budget=${2:-}; shift 2 || { echo "gpu_check: --budget needs seconds" >&2; exit 2; } ;;
        --bundle) bundle=1; shift ;;
        -h|--help) usage; exit 0 ;;
        -*) echo "gpu_check: unknown option $1 (--help)" >&2; exit 2 ;;
        *) [ -z "$out" ] || { echo "gpu_check: one output folder only ($out, $1)" >&2; exit 2; }
           out=$1; shift ;;
    esac
done
case $budget in ''|*[!0-9]*) echo "gpu_check: --budget '$budget' is not a number of seconds" >&2; exit 2 ;; esac
case ,$steps, in *[!0-9,]*) echo "gpu_check: --steps '$steps' is not a list of 0..7" >&2; exit 2 ;; esac

# The built tree: this script's, or the build folder of $COLLBENCH when set (make check sets it:
# in a VPATH build the binaries are not next to the sources).
build=$top
[ -n "${COLLBENCH:-}" ] && build=$(cd "$(dirname "$COLLBENCH")" && pwd)
collbench=${COLLBENCH:-$top/collbench}
dev_probe=$build/tests/gpu/dev_probe
nccl_shim=$build/src/shim/.libs/libnccl.so.2
nccl_port=$build/examples/nccl_port
libs=$top/.gpu_libs
# the carried libraries first, then libstrata.so of the tree (examples link it)
export LD_LIBRARY_PATH="$libs:$build/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# A libtool wrapper script holds absolute paths of the machine that built it: run the binary
# from .libs/ instead, with libstrata.so found through LD_LIBRARY_PATH.
real_bin() {
    local b=$1
    if [ -f "$b" ] && head -c 2 "$b" | grep -q '#!' && [ -x "$(dirname "$b")/.libs/$(basename "$b")" ]; then
        echo "$(dirname "$b")/.libs/$(basename "$b")"
    else
        echo "$b"
    fi
}

if [ "$bundle" = 1 ]; then
    mkdir -p "$libs" || exit 1
    n=0
    for b in "$collbench" "$dev_probe" "$(real_bin "$nccl_port")" "$build/.libs/libstrata.so"; do
        [ -e "$b" ] || continue
        while read -r lib; do
            case $(basename "$lib") in
                libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|ld-linux*|libgcc_s.so*|\
                libstdc++.so*|libcuda.so*|libnvidia*) continue ;;
            esac
            cp -L -n "$lib" "$libs/" && n=$((n + 1))
        done < <(ldd "$b" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3}')
    done
    cp -L -n "$build"/.libs/libstrata.so* "$libs/" 2>/dev/null
    echo "gpu_check --bundle: $(ls "$libs" | wc -l) libraries in $libs ($(du -sh "$libs" | cut -f1)):"
    ls "$libs" | sed 's/^/  /'
    exit 0
fi

[ -n "$out" ] || { echo "gpu_check: give an output folder (--help)" >&2; exit 2; }
mkdir -p "$out" && [ -w "$out" ] || { echo "gpu_check: cannot write to $out" >&2; exit 2; }
out=$(cd "$out" && pwd)
json=$out/gpu_check.json
log=$out/gpu_check.log
: >"$log"

now() { date +%s.%N; }
t_start=$(now)
deadline=$(awk -v s="$t_start" -v b="$budget" 'BEGIN { printf "%.0f", s + b }')
left() { awk -v d="$deadline" -v n="$(now)" 'BEGIN { x = d - n; printf "%d", (x > 0) ? x : 0 }'; }
say() { printf '%s\n' "$*" | tee -a "$log"; }

# ---- JSON ----
json_str() {
    local s
    s=$(printf '%s' "$1" | tr -d '\000-\010\013\014\016-\037')
    s=${s//\\/\\\\}; s=${s//\"/\\\"}; s=${s//$'\n'/\\n}; s=${s//$'\t'/\\t}; s=${s//$'\r'/}
    printf '"%s"' "$s"
}
json_num() { # a number as JSON, or null
    if printf '%s' "$1" | grep -Eq '^-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$'; then printf '%s' "$1"; else printf null; fi
}
# the valid JSON object in file $1, or null
json_file() {
    if [ -s "$1" ] && { ! command -v python3 >/dev/null || python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$1" 2>/dev/null; }; then
        tr -d '\n' <"$1"
    else
        printf null
    fi
}

# ---- steps ----
step_json=()         # one JSON object per step run
declare -A step_result
cur=-1 cur_name="" cur_t0=0 result="" reason="" details=""
det() { details+="${details:+, }$(json_str "$1"): $2"; }   # key, raw JSON value
dets() { det "$1" "$(json_str "$2")"; }                     # key, string
detn() { det "$1" "$(json_num "$2")"; }                     # key, number
step_on() { case ,$steps, in *,$1,*) return 0 ;; esac; return 1; }
begin() {
    cur=$1 cur_name=$2 result="" reason="" details="" cur_t0=$(now)
    say ""
    say "=== step $cur: $cur_name ($(left) s of the budget left)"
}
end() { # result reason
    local sec
    result=$1 reason=$2
    sec=$(awk -v a="$cur_t0" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }')
    step_result[$cur]=$result
    step_json+=("{\"step\": $cur, \"name\": $(json_str "$cur_name"), \"result\": \"$result\", \"reason\": $(json_str "$reason"), \"seconds\": $sec, \"details\": {$details}}")
    say "$(printf '%-4s step %d %-13s %6s s  %s' "$result" "$cur" "$cur_name" "$sec" "$reason")"
}
skip_step() { begin "$1" "$2"; end SKIP "$3"; }

# Runs a command bounded by the budget (at most $1 seconds), its output into file $2 and the log.
# Returns the command's status (124: the time ran out), or 125 when the budget was spent before.
run() {
    local max=$1 file=$2 lim rc
    shift 2
    lim=$(left); [ "$lim" -gt "$max" ] && lim=$max
    if [ "$lim" -lt 5 ]; then
        say "not run, the budget is spent: $*" | tee "$file" >/dev/null
        return 125
    fi
    local cmd="$*"
    cmd=${cmd//$'\n'/ }
    [ ${#cmd} -gt 220 ] && cmd="${cmd:0:200} ..."
    say "\$ ${cmd#"$build"/} (limit ${lim} s)"
    timeout -k 10 "$lim" "$@" >"$file" 2>&1; rc=$?
    cat "$file" >>"$log"
    [ "$rc" = 124 ] && say "(stopped after $lim s)"
    return "$rc"
}

label_dev=cuda
[ "$dry" = 1 ] && label_dev="sim (dry run)"
mode=gpu; [ "$dry" = 1 ] && mode=dry-run
say "# gpu_check: $mode, output in $out, budget $budget s, steps $steps"
say "# rerun with: cd $(printf '%q' "$PWD") && $(printf '%q' "$0")$([ "$dry" = 1 ] && echo " --dry-run") --steps $steps --budget $budget $(printf '%q' "$out")"

# ---- 0: environment ----
if step_on 0; then
    begin 0 env
    probs=()
    dets uname_r "$(uname -r)"
    dets hostname "$(hostname 2>/dev/null)"
    dets date "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    dets tree "$(git -C "$top" describe --always --dirty 2>/dev/null || echo unknown)"
    # the binaries and what they still need
    for b in "$collbench" "$dev_probe" "$(real_bin "$nccl_port")"; do
        name=${b#"$build"/}
        if [ ! -x "$b" ]; then
            dets "binary $name" "not built"
            continue
        fi
        missing=$(ldd "$b" 2>/dev/null | awk '/not found/ {print $1}' | tr '\n' ' ')
        dets "binary $name" "${missing:+missing: $missing}${missing:-ok}"
        [ -n "$missing" ] && probs+=("$name lacks $missing(bench/gpu_check.sh --bundle on the build machine)")
    done
    [ -x "$collbench" ] || probs+=("collbench is not built")
    # the GPU as nvidia-smi sees it
    if command -v nvidia-smi >/dev/null; then
        run 30 "$out/nvidia-smi-q.txt" nvidia-smi -q
        q=name,driver_version,compute_mode,mig.mode.current,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,ecc.mode.current,memory.total,persistence_mode
        if run 30 "$out/nvidia-smi.csv" nvidia-smi --query-gpu=$q --format=csv,noheader; then
            IFS=, read -r g_name g_drv g_cm g_mig g_sm g_mem g_maxsm g_maxmem g_ecc g_total g_pm <"$out/nvidia-smi.csv"
            for k in name drv cm mig sm mem maxsm maxmem ecc total pm; do
                v=g_$k; v=${!v}; v=${v# }; printf -v "g_$k" '%s' "$v"; dets "gpu_$k" "$v"
            done
            [ "$g_cm" = Default ] || probs+=("compute mode is '$g_cm', not Default: ranks cannot share the GPU")
            case $g_mig in Enabled*) probs+=("MIG is enabled") ;; esac
            dets gpu_count "$(wc -l <"$out/nvidia-smi.csv")"
        else
            probs+=("nvidia-smi --query-gpu failed: $(tail -1 "$out/nvidia-smi.csv")")
        fi
    else
        dets nvidia_smi "absent"
        [ "$dry" = 1 ] || probs+=("no nvidia-smi")
    fi
    # CUDA attributes through strata's own backend
    if [ -x "$dev_probe" ]; then
        run 60 "$out/dev_probe_quick.txt" "$dev_probe" --quick --json "$out/dev_probe_quick.json"; rc=$?
        detn dev_probe_quick_status "$rc"
        det dev_probe_quick "$(json_file "$out/dev_probe_quick.json")"
        [ "$rc" = 77 ] && dets dev_probe_quick_skip "$(grep -m1 '^SKIP all' "$out/dev_probe_quick.txt")"
    else
        dets dev_probe_quick "tests/gpu/dev_probe is not built"
    fi
    # torch and NCCL of the image (torch.cuda.nccl.version() is the version torch was compiled with, not the library loaded)
    if command -v python3 >/dev/null; then
        run 60 "$out/torch.txt" python3 -c '
import json
try:
    import torch
    v = {"torch": torch.__version__, "torch_cuda": torch.version.cuda,
         "cuda_available": torch.cuda.is_available()}
    try:
        v["torch_nccl_compiled"] = ".".join(map(str, torch.cuda.nccl.version()))
    except Exception as e:
        v["torch_nccl_compiled"] = "unknown: %s" % e
    import os
    lib = os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cuda.so")
    v["libtorch_cuda"] = lib if os.path.exists(lib) else None
except Exception as e:
    v = {"torch": None, "why": str(e)}
print(json.dumps(v))'
        det torch "$(tail -1 "$out/torch.txt" | grep '^{' || echo null)"
        lt=$(tail -1 "$out/torch.txt" | sed -n 's/.*"libtorch_cuda": "\([^"]*\)".*/\1/p')
        if [ -n "$lt" ] && command -v nm >/dev/null; then
            nm -D --undefined-only "$lt" 2>/dev/null | awk '{print $NF}' | grep '^nccl' >"$out/libtorch_cuda_nccl.txt"
            detn libtorch_cuda_nccl_imports "$(wc -l <"$out/libtorch_cuda_nccl.txt")"
            cat "$out/libtorch_cuda_nccl.txt" >>"$log"
        fi
        if python3 -m pip --version >/dev/null 2>&1; then
            dets nccl_wheel "$(python3 -m pip show nvidia-nccl-cu13 nvidia-nccl-cu12 2>/dev/null | awk '/^Name|^Version/ {printf "%s ", $2}')"
        fi
    fi
    if [ ${#probs[@]} -gt 0 ]; then
        end FAIL "$(IFS=';'; echo "${probs[*]}")"
    elif [ "$dry" = 1 ]; then
        end PASS "dry run: host probes only (no GPU is needed)"
    else
        end PASS "${g_name:-GPU} ${g_drv:+driver $g_drv}, compute mode Default, MIG off"
    fi
fi

# ---- 1-4: tests/gpu/dev_probe, one run ----
probe_json=null probe_rc=-1 probe_why="" probe_sec=0
if step_on 1 || step_on 2 || step_on 3 || step_on 4; then
    if [ ! -x "$dev_probe" ]; then
        probe_why="tests/gpu/dev_probe is not built (make builds it where CUDA's headers are)"
    else
        say ""
        say "=== steps 1-4: tests/gpu/dev_probe (one run, $(left) s of the budget left)"
        t0=$(now)
        run 200 "$out/dev_probe.txt" "$dev_probe" --json "$out/dev_probe.json"; probe_rc=$?
        probe_sec=$(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }')
        probe_json=$(json_file "$out/dev_probe.json")
        case $probe_rc in
            0|1) ;;
            77) probe_why="no GPU: $(grep -m1 '^SKIP all' "$out/dev_probe.txt" | sed 's/^SKIP all: //')" ;;
            124) probe_why="dev_probe ran out of time after $probe_sec s" ;;
            *) probe_why="dev_probe exited with status $probe_rc: $(tail -2 "$out/dev_probe.txt" | tr '\n' ' ')" ;;
        esac
    fi
fi
# PASS/FAIL/SKIP of the probe's items whose names match $1 (an ERE), into result and reason
probe_items() {
    local re=$1 what=$2 n p f s first
    n=$(grep -cE "^(PASS|FAIL|SKIP) ($re):" "$out/dev_probe.txt" 2>/dev/null)
    p=$(grep -cE "^PASS ($re):" "$out/dev_probe.txt" 2>/dev/null)
    f=$(grep -cE "^FAIL ($re):" "$out/dev_probe.txt" 2>/dev/null)
    s=$(grep -cE "^SKIP ($re):" "$out/dev_probe.txt" 2>/dev/null)
    det items "$(grep -E "^(PASS|FAIL|SKIP) ($re):" "$out/dev_probe.txt" 2>/dev/null | awk '
        { r = $1; $1 = ""; sub(/^ /, ""); n = index($0, ":"); name = substr($0, 1, n - 1);
          d = substr($0, n + 2); gsub(/\\/, "\\\\", d); gsub(/"/, "\\\"", d);
          printf "%s{\"result\": \"%s\", \"name\": \"%s\", \"detail\": \"%s\"}", (c++ ? ", " : "["), r, name, d }
        END { printf (c ? "]" : "[]") }')"
    dets source "tests/gpu/dev_probe (one run for steps 1-4: $probe_sec s, counted in step 1)"
    if [ "$n" = 0 ]; then
        end FAIL "dev_probe printed no $what item (status $probe_rc)"
    elif [ "$f" -gt 0 ]; then
        first=$(grep -m1 -E "^FAIL ($re):" "$out/dev_probe.txt")
        end FAIL "$f of $n $what items failed; first: $first"
    elif [ "$p" = 0 ]; then
        end SKIP "$(grep -m1 -E "^SKIP ($re):" "$out/dev_probe.txt" | sed 's/^SKIP //')"
    else
        end PASS "$p $what items passed$([ "$s" -gt 0 ] && echo ", $s skipped")"
    fi
}
probe_step() { # step name regex what
    step_on "$1" || return 0
    if [ -n "$probe_why" ]; then
        if [ "$dry" = 1 ]; then
            skip_step "$1" "$2" "dry run: $probe_why"
        elif [ "$probe_rc" = 77 ]; then
            skip_step "$1" "$2" "$probe_why"
        else
            begin "$1" "$2"; end FAIL "$probe_why"
        fi
        return 0
    fi
    begin "$1" "$2"
    [ "$1" = 1 ] && cur_t0=$(awk -v a="$cur_t0" -v s="$probe_sec" 'BEGIN { printf "%.3f", a - s }')
    probe_items "$3" "$4"
}
metric() { # a metric of dev_probe's JSON, or empty
    grep -o "\"$1\": [-0-9.eE+]*" "$out/dev_probe.json" 2>/dev/null | head -1 | awk '{print $2}'
}
probe_step 1 copy_bw 'copy_bw|copy|zero' "device copy"
anchor=$(metric copy_d2d_GBps)
[ "${step_result[1]:-}" = PASS ] && say "     anchor: device copy ${anchor:-?} GB/s (read+write)"
probe_step 2 kernel_exact 'reduce_exact[a-z0-9_]*' "kernel exactness"
probe_step 3 kernel_bw 'reduce_bw[a-z0-9_]*' "kernel bandwidth"
probe_step 4 ipc 'ipc|mem_alloc_shared|mem_export|mem_free_shared' "IPC"

# ---- collbench runs ----
dev=cuda; [ "$dry" = 1 ] && dev=sim
# rows of a collbench table: size time_oop algbw busbw wrong_oop time_ip algbw busbw wrong_ip
cb_rows() { awk '$1 ~ /^[0-9]+$/ && NF >= 12 { print $1, $(NF-7), $(NF-6), $(NF-5), $(NF-4), $(NF-3), $(NF-2), $(NF-1), $NF }' "$1"; }
cb_wrong() { cb_rows "$1" | awk '{ w += $5 + $9 } END { print w + 0 }'; }
cb_nrows() { cb_rows "$1" | wc -l; }

# ---- 5: end-to-end collectives ----
if step_on 5; then
    begin 5 collectives
    dets device "$label_dev"
    if [ ! -x "$collbench" ]; then
        end FAIL "collbench is not built"
    else
        fails=() notrun=() runs="" nruns=0
        if [ "$dry" = 1 ]; then
            ranks="2 4 8" sz=(-b 8 -e 64K -f 32 -n 2 -w 1) szall=(-b 64 -e 4K -f 64 -n 1 -w 0) lim=40
        else
            ranks="2 4 8" sz=(-b 8 -e 16M -f 8 -n 5 -w 2) szall=(-b 64 -e 1M -f 128 -n 1 -w 0) lim=90
        fi
        cb_check() { # name file rc command...
            local name=$1 f=$2 rc=$3 w n order cmd
            shift 3
            cmd="$*"; cmd=${cmd#"$build"/}
            w=$(cb_wrong "$f") n=$(cb_nrows "$f")
            order=$(grep -m1 '^# Stream order:' "$f" | sed 's/^# Stream order: //')
            runs+="${runs:+, }{\"run\": $(json_str "$name"), \"command\": $(json_str "$cmd"), \"status\": $rc, \"rows\": $n, \"wrong\": $w, \"stream_order\": $(json_str "$order")}"
            nruns=$((nruns + 1))
            if [ "$rc" = 125 ]; then
                notrun+=("$name")
            elif [ "$rc" != 0 ] || [ "$n" = 0 ] || [ "$w" != 0 ]; then
                fails+=("$name: status $rc, $n rows, #wrong $w$( [ "$rc" != 0 ] && printf ': %s' "$(grep -v '^#' "$f" | grep -E 'collbench|strata' | tail -2 | tr '\n' ' ')")")
                say "     FAIL $name: status $rc, $n rows, #wrong $w"
            else
                say "     ok   $name: $n rows, #wrong 0"
            fi
        }
        for m in $ranks; do
            f=$out/step5_m$m.txt
            c=("$collbench" -np "$m" --device "$dev" all_reduce,reduce_scatter,all_gather,broadcast,reduce
               "${sz[@]}" -c 1 -T "$lim")
            run "$lim" "$f" "${c[@]}"
            cb_check "$m ranks, 5 collectives" "$f" $? "${c[@]}"
        done
        f=$out/step5_dtypes.txt
        c=("$collbench" -np 4 --device "$dev" all_reduce -d all -o all "${szall[@]}" -c 1 -T "$lim")
        run "$lim" "$f" "${c[@]}"
        cb_check "4 ranks, all_reduce, every dtype x op" "$f" $? "${c[@]}"
        # the NCCL-API example (a GPU only; it SKIPs, 77, without one)
        nb=$(real_bin "$nccl_port")
        if [ -x "$nb" ]; then
            run 60 "$out/step5_nccl_port.txt" "$nb" 4; rc=$?
            dets nccl_port "status $rc: $(tail -3 "$out/step5_nccl_port.txt" | tr '\n' ' ')"
            if [ "$rc" = 125 ]; then
                notrun+=("examples/nccl_port")
            elif [ "$rc" != 0 ] && ! { [ "$rc" = 77 ] && [ "$dry" = 1 ]; }; then
                fails+=("examples/nccl_port: status $rc: $(tail -1 "$out/step5_nccl_port.txt")")
            fi
        else
            dets nccl_port "examples/nccl_port is not built (make check builds it)"
        fi
        det runs "[$runs]"
        dets stream_order_test "every checked call of collbench --device is queued as producer -> collective -> consumer on one stream with one stream_sync (producer and consumer are reduction kernels, or copies where the build has none: see each run's stream_order); #wrong 0 means the stream's order held. No separate producer/consumer program with a clock64 delay exists yet."
        if [ ${#fails[@]} -gt 1 ]; then
            end FAIL "${fails[0]} (and ${#fails[@]} failures in all: details.runs)"
        elif [ ${#fails[@]} = 1 ]; then
            end FAIL "${fails[0]}"
        elif [ ${#notrun[@]} -gt 0 ]; then
            end SKIP "the budget was spent before $(IFS=';'; echo "${notrun[*]}")$([ "$nruns" -gt ${#notrun[@]} ] && echo "; the other runs passed")"
        else
            end PASS "$nruns collbench runs on $label_dev, #wrong 0 everywhere"
        fi
    fi
fi

# ---- 6: performance ----
lat_us="" hbm_min=""
if step_on 6; then
    begin 6 performance
    dets device "$label_dev"
    if [ ! -x "$collbench" ]; then
        end FAIL "collbench is not built"
    else
        fails=() notrun=() rows="" hbm=""
        # a run's status into fails or notrun
        perf_rc() { case $1 in 0) ;; 125) notrun+=("$2") ;; *) fails+=("$2: status $1") ;; esac; }
        # a dry run's figures are the simulated device's: their keys say so, so that nothing
        # reading the JSON can take them for a GPU's
        k=""; [ "$dry" = 1 ] && k="sim_dry_run_"
        # nor divided by a GPU's copy bandwidth (a dry run on a GPU machine measures one)
        [ "$dry" = 1 ] && anchor=""
        if [ "$dry" = 1 ]; then
            ranks="2 4" sz=(-b 4 -e 64K -f 16 -n 2 -w 1) lat=(-n 20 -w 2) lim=30
        else
            ranks="2 4 8" sz=(-b 4 -e 1G -f 4 -n 5 -w 1) lat=(-n 1000 -w 100) lim=120
        fi
        f=$out/step6_latency.txt
        run 60 "$f" "$collbench" -np 2 --device "$dev" all_reduce -b 8 -e 8 "${lat[@]}" -c 0 -T 60; rc=$?
        perf_rc "$rc" "8-byte latency run"
        lat_us=$(cb_rows "$f" | awk 'NR == 1 { print $2 }')
        f=$out/step6_latency_z1.txt
        run 60 "$f" "$collbench" -np 2 --device "$dev" all_reduce -b 8 -e 8 -n 200 -w 20 -z 1 -c 0 -T 60; rc=$?
        perf_rc "$rc" "8-byte latency run -z 1"
        lat_z1_us=$(cb_rows "$f" | awk 'NR == 1 { print $2 }')
        for m in $ranks; do
            f=$out/step6_m$m.txt
            [ "$dry" = 0 ] && [ "$m" = 8 ] && sz[3]=256M # 8 x 4 buffers of 1 GiB: keep to the budget
            run "$lim" "$f" "$collbench" -np "$m" --device "$dev" all_reduce "${sz[@]}" -c 0 -T "$lim"; rc=$?
            perf_rc "$rc" "$m ranks"
            # per row: modelled HBM bytes (5m+1)S, their rate, and the fraction of the anchor
            rows+=$(cb_rows "$f" | awk -v m="$m" -v a="${anchor:-0}" '
                { S = $1; t = $2 * 1e-6; model = (5 * m + 1) * S; rate = (t > 0) ? model / t / 1e9 : 0
                  frac = (a > 0) ? sprintf("%.4f", rate / a) : "null"
                  printf ", {\"ranks\": %d, \"bytes\": %d, \"time_us\": %s, \"algbw\": %s, \"busbw\": %s, \"time_us_in_place\": %s, \"busbw_in_place\": %s, \"hbm_model_bytes\": %.0f, \"hbm_GBps\": %.2f, \"hbm_of_copy\": %s}", m, S, $2, $3, $4, $6, $8, model, rate, frac }')
            hbm+=$(cb_rows "$f" | awk -v m="$m" -v a="${anchor:-0}" '$1 >= 64 * 1048576 && a > 0 && $2 > 0 { printf " %s:%.4f", m, (5 * m + 1) * $1 / ($2 * 1e-6) / 1e9 / a }')
        done
        det "${k}allreduce" "[${rows#, }]"
        dets "${k}hbm_model" "copy path: (5m+1)S bytes of HBM traffic per all-reduce of S bytes per rank over m ranks on one GPU (copy-in 2S, reduce-scatter S+S/m, all-gather 2S per rank); hbm_of_copy = model / time / the copy anchor of step 1 (${anchor:-none} GB/s)"
        detn "${k}allreduce_8B_2ranks_us" "$lat_us"
        detn "${k}allreduce_8B_2ranks_sync_each_us" "$lat_z1_us"
        dets latency_note "allreduce_8B_2ranks_us: collbench's time (calls queued back to back on the stream, one stream_sync, average per call, as nccl-tests); _sync_each_us: -z 1, each call on the legacy default stream followed by stream_sync"
        # the least fraction from 64 MiB on, per number of ranks and over all
        hbm_min=$(for x in $hbm; do echo "${x#*:}"; done | sort -g | head -1)
        per_m="" sep=""
        for m in $ranks; do
            v=$(for x in $hbm; do [ "${x%%:*}" = "$m" ] && echo "${x#*:}"; done | sort -g | head -1)
            per_m+="$sep\"$m\": $(json_num "$v")" sep=", "
        done
        det "${k}hbm_of_copy_from_64MiB" "{$per_m}"
        if [ ${#fails[@]} -gt 0 ]; then
            end FAIL "$(IFS=';'; echo "${fails[*]}")"
        elif [ ${#notrun[@]} -gt 0 ]; then
            end SKIP "the budget was spent before $(IFS=';'; echo "${notrun[*]}")"
        elif [ "$dry" = 1 ]; then
            end SKIP "dry run: no GPU; the figures in details are of the simulated device on the CPU, never GPU performance"
        else
            end PASS "all-reduce busbw and HBM fractions measured (targets below, as ratios)"
        fi
    fi
fi

# ---- 7: torch's "nccl" backend on strata's NCCL shim ----
if step_on 7; then
    begin 7 nccl_shim
    dets shim "${nccl_shim#"$build"/}"
    probs=()
    if [ ! -f "$nccl_shim" ]; then
        probs+=("the shim is not built (configure builds it where nccl.h is: src/shim/.libs/libnccl.so.2)")
    else
        soname=$(readelf -d "$nccl_shim" 2>/dev/null | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
        dets soname "$soname"
        [ "$soname" = libnccl.so.2 ] || probs+=("the shim's SONAME is '$soname', not libnccl.so.2")
        # every nccl symbol libtorch_cuda imports (step 0's list) must be exported by the shim
        if [ -s "$out/libtorch_cuda_nccl.txt" ]; then
            nm -D --defined-only "$nccl_shim" | awk '{print $3}' | sort -u >"$out/step7_shim_exports.txt"
            sort -u "$out/libtorch_cuda_nccl.txt" >"$out/step7_torch_imports.txt"
            lacking=$(comm -23 "$out/step7_torch_imports.txt" "$out/step7_shim_exports.txt" | tr '\n' ' ')
            detn torch_nccl_imports "$(wc -l <"$out/step7_torch_imports.txt")"
            dets torch_imports_not_in_shim "$lacking"
            [ -z "$lacking" ] || probs+=("libtorch_cuda imports what the shim lacks: $lacking")
        else
            dets torch_nccl_imports "unknown (no libtorch_cuda found in step 0)"
        fi
    fi
    if [ ${#probs[@]} -gt 0 ] && [ "$dry" = 1 ]; then
        end SKIP "dry run: $(IFS=';'; echo "${probs[*]}")"
    elif [ ${#probs[@]} -gt 0 ]; then
        end FAIL "$(IFS=';'; echo "${probs[*]}")"
    elif [ "$dry" = 1 ]; then
        end SKIP "dry run: torch's nccl backend needs a GPU; the shim's SONAME is libnccl.so.2$([ -s "$out/libtorch_cuda_nccl.txt" ] && echo " and it exports every nccl symbol libtorch_cuda imports")"
    else
        # one launcher: two ranks of this script on the one GPU, each printing one JSON line
        cat >"$out/step7_torch.py" <<'PY'
import ctypes, json, os, subprocess, sys
shim = os.path.realpath(sys.argv[1])
if os.environ.get("RANK") is None:
    env = dict(os.environ, WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(29500 + os.getpid() % 2000), LD_PRELOAD=shim)
    procs = [subprocess.Popen([sys.executable, sys.argv[0], shim], env=dict(env, RANK=str(r)),
                              stdout=subprocess.PIPE, text=True) for r in range(2)]
    lines, ok = [], True
    for p in procs:
        try:
            out, _ = p.communicate(timeout=110)
        except subprocess.TimeoutExpired:
            p.kill(); out, _ = p.communicate(); ok = False
        js = [l for l in out.splitlines() if l.startswith("{")]
        lines.append(json.loads(js[-1]) if js else {"ok": False, "why": "no result, status %s" % p.returncode})
        ok = ok and p.returncode == 0 and lines[-1].get("ok") is True
    print(json.dumps({"ok": ok, "ranks": lines}))
    sys.exit(0 if ok else 1)
rank = int(os.environ["RANK"])
res = {"rank": rank, "ok": False}
try:
    import torch, torch.distributed as dist
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", rank=rank, world_size=2, device_id=torch.device("cuda", 0))
    t = torch.full((1 << 20,), float(rank + 1), device="cuda", dtype=torch.float32)
    dist.all_reduce(t)
    torch.cuda.synchronize()
    res["value_min"], res["value_max"] = float(t.min()), float(t.max())
    maps = sorted({l.split()[-1] for l in open("/proc/self/maps") if "/" in l and
                   os.path.basename(l.split()[-1]).startswith("libnccl.so")})
    res["libnccl_mapped"] = maps
    res["libstrata_mapped"] = any("libstrata.so" in l for l in open("/proc/self/maps"))
    class DlInfo(ctypes.Structure):
        _fields_ = [("fname", ctypes.c_char_p), ("fbase", ctypes.c_void_p),
                    ("sname", ctypes.c_char_p), ("saddr", ctypes.c_void_p)]
    glob = ctypes.CDLL(None)
    info = DlInfo()
    addr = ctypes.cast(glob.ncclAllReduce, ctypes.c_void_p)
    ctypes.CDLL("libc.so.6").dladdr(addr, ctypes.byref(info))
    res["ncclAllReduce_from"] = info.fname.decode() if info.fname else None
    served = res["ncclAllReduce_from"] and os.path.dirname(os.path.realpath(res["ncclAllReduce_from"])) == os.path.dirname(shim)
    only_shim = bool(maps) and all(os.path.dirname(os.path.realpath(m)) == os.path.dirname(shim) for m in maps)
    res["ok"] = bool(res["value_min"] == 3.0 and res["value_max"] == 3.0 and served and only_shim
                     and res["libstrata_mapped"])
    dist.destroy_process_group()
except Exception as e:
    res["why"] = "%s: %s" % (type(e).__name__, e)
print(json.dumps(res))
sys.exit(0 if res["ok"] else 1)
PY
        if ! command -v python3 >/dev/null; then
            end FAIL "no python3 for the torch run"
        else
            run 130 "$out/step7_torch.txt" python3 "$out/step7_torch.py" "$nccl_shim"; rc=$?
            r=$(grep '^{' "$out/step7_torch.txt" | tail -1)
            det torch_run "${r:-null}"
            detn torch_run_status "$rc"
            if [ "$rc" = 125 ]; then
                end SKIP "the budget was spent before the torch run"
            elif [ "$rc" = 0 ]; then
                end PASS "torch nccl backend on the shim: 2 ranks, all_reduce of 1M floats = 3.0 on the GPU; libnccl.so.2 mapped from the shim's folder only, ncclAllReduce resolved to it, libstrata mapped"
            else
                end FAIL "torch on the shim: status $rc: $(printf '%s' "${r:-$(tail -2 "$out/step7_torch.txt" | tr '\n' ' ')}" | cut -c1-400)"
            fi
        fi
    fi
fi

# ---- targets (ratios, never the verdict) ----
ratio() { awk -v m="$1" -v t="$2" -v inv="${3:-0}" 'BEGIN { if (m == "" || m + 0 <= 0) print "null"; else printf "%.3f", inv ? t / m : m / t }'; }
kmin=$(grep -o '"reduce_bw_[a-z0-9]*_[0-9]*_of_copy": [-0-9.eE+]*' "$out/dev_probe.json" 2>/dev/null | awk '{print $2}' | sort -g | head -1)
kall=$(grep -o '"reduce_bw_[a-z0-9]*_[0-9]*_of_copy": [-0-9.eE+]*' "$out/dev_probe.json" 2>/dev/null | tr '\n' ',' | sed 's/,$//')
note="issue 18's targets for the GPU run, as ratio = measured / target (>= 1 meets it), null where not measured; a benchmark, never the verdict of this run"
[ "$dry" = 1 ] && note+="; dry run: nothing was measured on a GPU"
targets="\"note\": $(json_str "$note")"
targets+=", \"reduce_kernel_of_copy\": {\"target\": 0.80, \"min\": $(json_num "$kmin"), \"ratio\": $(ratio "$kmin" 0.80), \"cases\": {$kall}}"
targets+=", \"allreduce_hbm_of_copy_from_64MiB\": {\"target\": 0.70, \"min\": $(json_num "$hbm_min"), \"ratio\": $(ratio "$hbm_min" 0.70)}"
lat_for_target=$lat_us; [ "$dry" = 1 ] && lat_for_target=""
targets+=", \"allreduce_8B_2ranks_us\": {\"target_below\": 50, \"measured\": $(json_num "$lat_for_target"), \"ratio\": $(ratio "$lat_for_target" 50 1)}"
say ""
say "=== targets (measured / target; >= 1 meets it; not a verdict)"
say "  reduce kernels, 2-8 sources at 1 GiB, of the copy anchor: min ${kmin:-n/a} / 0.80 = $(ratio "$kmin" 0.80)"
say "  all-reduce from 64 MiB, HBM traffic of the copy anchor:    min ${hbm_min:-n/a} / 0.70 = $(ratio "$hbm_min" 0.70)"
say "  8-byte all-reduce, 2 ranks:                              ${lat_for_target:-n/a} us (target < 50): 50 / measured = $(ratio "$lat_for_target" 50 1)"

# ---- the JSON ----
npass=0 nfail=0 nskip=0
for k in "${!step_result[@]}"; do
    case ${step_result[$k]} in PASS) npass=$((npass + 1)) ;; FAIL) nfail=$((nfail + 1)) ;; *) nskip=$((nskip + 1)) ;; esac
done
total=$(awk -v a="$t_start" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }')
{
    printf '{"script": "bench/gpu_check.sh", "mode": "%s", "device": %s, "budget_seconds": %s, "total_seconds": %s,\n' \
        "$mode" "$(json_str "$label_dev")" "$budget" "$total"
    printf ' "steps": [\n  %s\n ],\n' "$(IFS=$'\n'; echo "${step_json[*]}" | sed '2,$s/^/, /' | tr '\n' '\n')"
    printf ' "targets": {%s},\n' "$targets"
    printf ' "dev_probe": %s,\n' "$probe_json"
    printf ' "summary": {"pass": %d, "fail": %d, "skip": %d}}\n' "$npass" "$nfail" "$nskip"
} >"$json"
if command -v python3 >/dev/null && ! python3 -m json.tool "$json" >/dev/null 2>"$out/json_error.txt"; then
    say "gpu_check: the JSON does not parse: $(cat "$out/json_error.txt")"
    nfail=$((nfail + 1))
fi
say ""
say "gpu_check: $npass PASS, $nfail FAIL, $nskip SKIP in $total s; $json, $log"
[ "$nfail" = 0 ]
