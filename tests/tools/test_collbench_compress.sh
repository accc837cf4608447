#!/bin/bash
# test_collbench_compress.sh: collbench --compress (strataAllReduceCompressed) on emulated nodes
# forked here (one STRATA_HOSTID per node: no network namespace, no root). Every codec, on 2 nodes
# x 2 ranks and on 3+1, with -c 1: status 0, '#wrong' 0 in both halves of every row (none and
# topk:1 exact, the others within the bound of --help; every rank's result bitwise rank 0's), and
# the wire column, at the same size, in the ratio to codec none's that the codec's bytes per
# element give (fp16, bf16 1/2; int8 (1 + 4/256)/4; topk:0.1 0.1 x (4 + 4)/4; sign (1/8 + 4/256)/4;
# within 3 %); half and bfloat16 data, avg, a node count that is not a power of two; one node
# sends nothing (wire 0). Bad specs and what --compress does not take (another op, datatype or
# collective, device buffers) exit 2 with one line on stderr before any rank starts.
#   test_collbench_compress.sh [--collbench P]   (default: $COLLBENCH, ./collbench, the top)
# Exit 0 pass, 1 fail, 99 no collbench.
set -u
here=$(cd "$(dirname "$0")" && pwd)
collbench=${COLLBENCH:-}
[ "${1:-}" = --collbench ] && collbench=$2
if [ -z "$collbench" ]; then
    for c in ./collbench "$here/../../collbench"; do [ -x "$c" ] && { collbench=$c; break; }; done
fi
[ -n "$collbench" ] && [ -x "$collbench" ] || { echo "collbench not found" >&2; exit 99; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/cbcompress.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# bad ARGS...: exit 2, exactly one stderr line matching $want (set before the call), empty stdout
bad() {
    local rc lines
    timeout 20 "$collbench" "$@" >"$tmp/out" 2>"$tmp/err" </dev/null; rc=$?
    lines=$(wc -l <"$tmp/err")
    if [ "$rc" != 2 ] || [ "$lines" != 1 ] || [ -s "$tmp/out" ] ||
       ! grep -q -e "$want" "$tmp/err"; then
        fail "collbench $* -> rc $rc, $lines stderr line(s), want 2 and 1 line matching '$want':"
        sed 's/^/    /' "$tmp/err" | head -5
    else
        echo "ok: collbench $* -> $(cat "$tmp/err")"
    fi
}

# run NAME ARGS...: status 0, '# Out of bounds values : 0 OK', every row complete (16 columns:
# nccl-tests' 13, wire and the two speedups) with #wrong 0 twice; the rows are left in $tmp/rows
run() {
    local name=$1 rc; shift
    timeout 300 "$collbench" "$@" -n 2 -w 1 -c 1 >"$tmp/out" 2>"$tmp/err" </dev/null; rc=$?
    grep -E '^ +[0-9]+ ' "$tmp/out" >"$tmp/rows"
    if [ "$rc" != 0 ] || ! grep -q '^# Out of bounds values : 0 OK$' "$tmp/out" ||
       [ ! -s "$tmp/rows" ] || ! awk 'NF != 16 || $9 != 0 || $13 != 0 { exit 1 }' "$tmp/rows"; then
        fail "$name: collbench $* -> rc $rc, want 0, no #wrong and 16 columns per row:"
        grep -E '^ +[0-9]+ |^# Out|^#  \^' "$tmp/out" | sed 's/^/    /' | head -8
        sed 's/^/    /' "$tmp/err" | tail -5
        return 1
    fi
    echo "ok: $name"
}

# The wire column of the row of SIZE bytes in $tmp/rows
wire_at() { awk -v s="$1" '$1 == s { print $14 }' "$tmp/rows"; }

# A libtool wrapper relinks on first use; do that once, quietly.
timeout 60 "$collbench" --help >/dev/null 2>&1

# --help documents the option, its columns and the bound (the text joined into one line)
timeout 20 "$collbench" --help >"$tmp/help" 2>&1
grep -q -E '^      --compress <spec> ' "$tmp/help" || fail "--help: no '--compress <spec>' line"
tr -s ' \n' '  ' <"$tmp/help" >"$tmp/help1"
for p in 'strataCommGetPhaseTimes bytes\[1\]' 'plain time / compressed time' \
         '> eps x \(N x A \+ S\)' 'int8 1/254 \+ u' 'topk and sign 1'; do
    grep -q -E -e "$p" "$tmp/help1" || fail "--help: no text matching '$p'"
done

# every codec on 2x2 and 3+1; the wire of 1 MiB of float compared with none's
size=1048576
for layout in "-np 4 --nodes 2" "--layout 3+1"; do
    # shellcheck disable=SC2086  # the layout is two or three words
    run "none on $layout" $layout --compress none -b 256k -e 1M -f 4 || continue
    grep -q '^# Compression: none (strataAllReduceCompressed, error feedback on) over 2 nodes' \
        "$tmp/out" || fail "none on $layout: no '# Compression:' line naming it"
    base=$(wire_at $size)
    for spec in fp16:0.5 bf16:0.5 int8:0.25390625 int8:64:0.265625 topk:0.1:0.2 topk:1:2 \
                sign:0.03515625 sign:64:0.046875 int8,noef:0.25390625; do
        codec=${spec%:*} want=${spec##*:}
        # shellcheck disable=SC2086
        run "$codec on $layout" $layout --compress "$codec" -b 256k -e 1M -f 4 || continue
        got=$(wire_at $size)
        if awk -v g="$got" -v b="$base" -v w="$want" \
               'BEGIN { r = g / b; exit !(b > 0 && r > w * 0.97 && r < w * 1.03) }'; then
            echo "ok: $codec on $layout: wire $got B = $(awk -v g="$got" -v b="$base" \
                 'BEGIN { printf "%.4f", g / b }') x none's $base B (want $want)"
        else
            fail "$codec on $layout: wire $got B against none's $base B, want a ratio of $want"
        fi
    done
done

# other datatypes and avg; 3 nodes of 1 and 2 ranks (avg over 3 ranks: 1/3 is inexact)
run "int8 on half and bfloat16, sum and avg" -np 4 --nodes 2 --compress int8 -d half,bfloat16 \
    -o sum,avg -b 64k -e 256k -f 4
run "fp16 on half, avg" -np 4 --nodes 2 --compress fp16 -d half -o avg -b 64k -e 64k
run "none on 2+1, avg (exact)" --layout 2+1 --compress none -o avg -b 4 -e 256k -f 16
run "sign on 3 nodes" -np 6 --nodes 3 --compress sign:32 -d bfloat16 -b 64k -e 64k
# on one node nothing is compressed: wire 0, and the header says why
if run "int8 on one node" -np 2 --compress int8 -b 64k -e 64k; then
    if [ "$(wire_at 65536)" = 0 ] && grep -q 'on one node nothing is compressed' "$tmp/out"; then
        echo "ok: one node: wire 0"
    else
        fail "int8 on one node: want wire 0 and a header saying nothing is compressed"
    fi
fi

# what --compress does not take: one line, status 2, before any rank starts
want="invalid --compress 'topk:2': the topk density is outside (0, 1]"
bad -np 4 --nodes 2 --compress topk:2
want="invalid --compress 'foo': unknown codec"; bad -np 4 --nodes 2 --compress foo
want="invalid --compress 'int8:0': the block"; bad -np 4 --nodes 2 --compress int8:0
want="invalid --compress 'int8,ef2': expected ',noef'"; bad -np 4 --nodes 2 --compress int8,ef2
want="--compress reduces with sum or avg, not prod (-o)"
bad -np 4 --nodes 2 --compress int8 -o prod
want="--compress takes float, half and bfloat16 data, not int32 (-d)"
bad -np 4 --nodes 2 --compress int8 -d int32
want="--compress applies to all_reduce only, not broadcast"
bad -np 4 --nodes 2 --compress int8 all_reduce,broadcast
want="--compress runs on host buffers (strataAllReduceCompressed), not --device sim"
bad -np 4 --nodes 2 --compress int8 --device sim

[ "$fails" = 0 ] && { echo "PASS"; exit 0; }
echo "$fails failure(s)"; exit 1
