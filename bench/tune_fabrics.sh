#!/bin/bash
# tune_fabrics.sh: calibration, cost model and tuning checked in one go, on three emulated
# fabrics (2 nodes x 2 ranks, MTU 9000, each node on its own CPU with its ranks pinned there:
# tests/emulation/run_collbench.sh --bind):
#   2g      one link per node capped at 2 Gbit/s
#   500m    one link per node capped at 500 Mbit/s
#   2g+1g   two links per node, one rail each (STRATA_RAIL_IFNAMES=emu0,emu1), at 2 and 1 Gbit/s
# On each: `collbench calibrate` writes the fabric profile; `collbench model --profile P
# --compare` prints the all-reduce time the model predicts for its own choice next to the
# measured one, per size (1 KiB .. 64 MiB, x4) with the error; `collbench tune` sweeps small,
# ring and hier (chunks, depth, even or rail-proportional shares), writes the tuning table, and
# times the tuned library against the best forced configuration at every size. At the end, the
# three summaries: worst model error at >= 1 MiB and below, worst tuned/best, and on 2g+1g the
# shares and the speedup of proportional over even shares at 64 MiB.
#   bench/tune_fabrics.sh [--collbench P] [--out DIR] [--fabrics "2g 500m 2g+1g"] [-n ITERS]
# Needs root and network namespaces (exit 77 otherwise). Files (profiles, tables, logs) stay in
# --out (default: a new folder under /tmp, printed). Takes about 15 minutes; run it on a quiet
# machine (anything else on the cores moves the sub-millisecond sizes by tens of percent).
set -u
here=$(cd "$(dirname "$0")" && pwd)
run=$here/../tests/emulation/run_collbench.sh
collbench=${COLLBENCH:-}
out="" fabrics="2g 500m 2g+1g" iters=3
while [ $# -gt 0 ]; do
    case $1 in
        --collbench) collbench=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --fabrics) fabrics=$2; shift 2 ;;
        -n) iters=$2; shift 2 ;;
        -h|--help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "tune_fabrics: unknown argument $1" >&2; exit 2 ;;
    esac
done
if [ -z "$collbench" ]; then
    for c in ./collbench "$here/../collbench"; do [ -x "$c" ] && { collbench=$(cd "$(dirname "$c")" && pwd)/$(basename "$c"); break; }; done
fi
[ -n "$collbench" ] && [ -x "$collbench" ] || { echo "tune_fabrics: collbench not found (--collbench)" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "tune_fabrics: SKIP: needs root (network namespaces)"; exit 77; }
[ -n "$out" ] || out=$(mktemp -d "${TMPDIR:-/tmp}/tune_fabrics.XXXXXX")
mkdir -p "$out" || exit 2
sweep=(-b 1K -e 64M -f 4)

fabric_args() {
    case $1 in
        2g) echo "--rate 2gbit" ;;
        500m) echo "--rate 500mbit" ;;
        2g+1g) echo "--links 2 --rate 2gbit,1gbit" ;;
        *) echo "tune_fabrics: unknown fabric $1 (2g, 500m, 2g+1g)" >&2; return 1 ;;
    esac
}

echo "# tune_fabrics: $(date -u +%FT%TZ), $collbench, files in $out"
status=0
for fab in $fabrics; do
    args=$(fabric_args "$fab") || exit 2
    echo
    echo "######## fabric $fab: 2 nodes x 2 ranks, $args, MTU 9000"
    # shellcheck disable=SC2086
    bash "$run" --collbench "$collbench" $args --mtu 9000 --no-bytes-check --bind --timeout 900 -- \
        calibrate --out "$out/$fab.profile.json" -n 20 >"$out/$fab.calibrate.log" 2>&1 || status=1
    grep '^# \(fabric\|intra\|inter\|rail\|small\|hier\)' "$out/$fab.calibrate.log"
    # shellcheck disable=SC2086
    bash "$run" --collbench "$collbench" $args --mtu 9000 --no-bytes-check --bind --timeout 900 -- \
        model --profile "$out/$fab.profile.json" --compare "${sweep[@]}" -n 20 >"$out/$fab.compare.log" 2>&1 || status=1
    grep -E '^#  +size|^ +[0-9]+[KM]? ' "$out/$fab.compare.log"
    # shellcheck disable=SC2086
    bash "$run" --collbench "$collbench" $args --mtu 9000 --no-bytes-check --bind --timeout 1800 -- \
        tune --profile "$out/$fab.profile.json" --out "$out/$fab.table.json" "${sweep[@]}" -n "$iters" \
        >"$out/$fab.tune.log" 2>&1 || status=1
    grep -E '^#   (small|ring|hier)|^# tuning table|^#  +size|^ +[0-9]+[KM]? |^# rail shares' "$out/$fab.tune.log"
done

echo
echo "######## summary (model error = (predicted - measured) / measured; tuned/best: the tuned library over the best forced configuration)"
printf "# %-7s %18s %18s %16s %s\n" fabric "model err >= 1M" "model err < 1M" "tuned/best max" "rail shares at 64M"
for fab in $fabrics; do
    [ -f "$out/$fab.compare.log" ] || continue
    read -r big small < <(awk '$1 ~ /^[0-9]+[KM]?$/ && $5 ~ /%$/ {
            s = $1; e = $5; sub(/%/, "", e); e = e + 0; e = (e < 0) ? -e : e
            bytes = s; if (s ~ /K$/) bytes = s * 1024; if (s ~ /M$/) bytes = s * 1048576
            if (bytes + 0 >= 1048576) { if (e > b) b = e } else { if (e > m) m = e } }
            END { printf "%.1f %.1f\n", b, m }' "$out/$fab.compare.log")
    worst=$(awk 'f && $1 ~ /^[0-9]+[KM]?$/ && NF >= 5 { if ($5 + 0 > w) w = $5 + 0 } /tuned\/best/ { f = 1 } END { printf "%.3f", w }' "$out/$fab.tune.log")
    shares=$(grep '^# rail shares' "$out/$fab.tune.log" | sed 's/^# rail shares at [0-9]*[KM]*: //')
    printf "  %-7s %17s%% %17s%% %16s %s\n" "$fab" "$big" "$small" "$worst" "${shares:-n/a (one link)}"
done
exit $status
