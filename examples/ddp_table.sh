#!/bin/bash
# ddp_table.sh: the comparison table of README "Use from PyTorch": examples/ddp_digits.py with each
# --comm on 4 ranks of this machine (torch.distributed.run) and on 2 emulated nodes x 2 ranks
# (examples/run_ddp_emu.sh, links capped at --rate; needs root), then one table: loss per epoch,
# final test accuracy, training step time, and the overlap measurement (forward + backward with
# DDP's reduction, without it under no_sync, and the difference: exposed communication per step).
#
#   sudo examples/ddp_table.sh [--comms "gloo strata strata-fp16"] [--rate 1gbit]
#                              [--local-only | --emu-only] [--keep DIR] [-- ddp_digits.py args]
# Default ddp_digits.py args here: --epochs 3 --timing-rounds 7 --timing-steps 20.
# Environment: STRATA_LIBRARY (else the package finds the build; see python/strata/_lib.py).
# Exit: 0 when every run succeeded, 1 otherwise (the table shows what ran).
set -u

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$here/.." && pwd)
# shellcheck source=../tests/emulation/emunet.sh
. "$top/tests/emulation/emunet.sh" # emunet_root_port
py=${STRATA_PYTHON:-/usr/bin/python3}
comms="gloo strata strata-fp16" rate=1gbit local=1 emu=1 keep=""
while [ $# -gt 0 ]; do
    case $1 in
        --comms) comms=$2; shift 2 ;;
        --rate) rate=$2; shift 2 ;;
        --local-only) emu=0; shift ;;
        --emu-only) local=0; shift ;;
        --keep) keep=$2; shift 2 ;;
        -h|--help) sed -n '2,/^set -u/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
        --) shift; break ;;
        *) echo "ddp_table: unknown option $1" >&2; exit 2 ;;
    esac
done
extra=(--epochs 3 --timing-rounds 7 --timing-steps 20 "$@")

out=${keep:-$(mktemp -d "${TMPDIR:-/tmp}/strata-ddp-table.XXXXXX")}
mkdir -p "$out" || exit 2
pgid=""
cleanup()
{
    local rc=$?
    trap - EXIT INT TERM
    [ -n "$pgid" ] && kill -TERM -- "-$pgid" 2>/dev/null
    [ -z "$keep" ] && rm -rf "$out"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

export PYTHONPATH="$top/python${PYTHONPATH:+:$PYTHONPATH}" PYTHONDONTWRITEBYTECODE=1
# torch 1.13 on Python 3.11: torch.distributed.run crashes on its default --redirects/--tee "0".
workaround=$("$py" -c 'from torch.distributed.elastic.multiprocessing.api import Std
print("--redirects 1 --tee 1" if Std.from_str("0") is None else "")') || exit 2

status=0
files=()
for comm in $comms; do
    if [ "$local" = 1 ]; then
        f="$out/local-$comm.json"
        echo "# 1 node x 4 ranks, --comm $comm" >&2
        # shellcheck disable=SC2086
        setsid timeout -k 10 600 "$py" -m torch.distributed.run --nnodes 1 --nproc_per_node 4 \
            --master_addr 127.0.0.1 --master_port "$(emunet_root_port)" \
            --log_dir "$out/logs-local-$comm" $workaround \
            "$top/examples/ddp_digits.py" --comm "$comm" --json "$f" "${extra[@]}" \
            >"$out/local-$comm.log" 2>&1 </dev/null &
        pgid=$!
        wait "$pgid" || { status=1; echo "ddp_table: local --comm $comm failed:" >&2
                          tail -n 20 "$out/local-$comm.log" >&2; }
        pgid=""
        files+=("$f")
    fi
    if [ "$emu" = 1 ]; then
        f="$out/emu-$comm.json"
        echo "# 2 emulated nodes x 2 ranks, links $rate, --comm $comm" >&2
        "$here/run_ddp_emu.sh" --rate "$rate" -- --comm "$comm" --json "$f" "${extra[@]}" \
            >"$out/emu-$comm.log" 2>&1 </dev/null ||
            { status=1; echo "ddp_table: emulated --comm $comm failed:" >&2
              tail -n 20 "$out/emu-$comm.log" >&2; }
        files+=("$f")
    fi
done

"$py" - "$rate" "${files[@]}" <<'EOF'
import json, os, sys
rate, files = sys.argv[1], sys.argv[2:]
print("| layout | --comm | loss per epoch | accuracy | step time | compute (no_sync) | "
      "with comm | exposed comm / step |")
print("|---|---|---|---|---|---|---|---|")
for f in files:
    where = ("1 node x 4" if os.path.basename(f).startswith("local") else
             "2 nodes x 2, %s" % rate)
    if not os.path.exists(f):
        comm = os.path.basename(f)[:-5].split("-", 1)[1]
        print("| %s | %s | (failed) | | | | | |" % (where, comm))
        continue
    r = json.load(open(f))
    ms = lambda v: "-" if v is None else "%.2f ms" % v
    print("| %s | %s | %s | %.2f %% | %s | %s | %s | %s |" % (
        where, r["comm"], " / ".join("%.4f" % v for v in r["epoch_loss"]), r["test_accuracy"],
        ms(r["step_ms"]), ms(r["nosync_ms"]), ms(r["sync_ms"]), ms(r["exposed_ms"])))
EOF
exit "$status"
