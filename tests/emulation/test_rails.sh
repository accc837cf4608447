#!/bin/bash
# test_rails.sh: checks emulated nodes with two links each (`emunet.sh up 2 --links 2`), the
# layout bench/rails.sh and strata's rails run on; no strata needed:
#   every node has emu0 (10.77.0.<k+1>) and emu1 (10.77.1.<k+1>), each link on its own switch;
#   each link's tc tbf rate is the one asked for, on both ends (node egress, switch egress);
#   traffic to a link's address takes that link only and gets that link's rate; both links at
#   once carry the sum of their rates (the two-link ceiling of bench/README.md);
#   `bytes <node> rx <if>` by name and by link number; the default (one link) layout unchanged;
#   `down`, a failure half-way through `up`, and `cleanup-stale` after a SIGKILLed owner leave
#   nothing: no namespace, no state file in /run/strata-emunet.
#   test_rails.sh   (TEST_RAILS_RATES=200mbit,100mbit TEST_RAILS_SECONDS=2 to change the probe)
# Exit 0 pass, 1 fail, 77 skip (not root, no network namespaces, no python3 or tc).
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=emunet.sh
. "$here/emunet.sh"

why=$(emunet_unavailable)
if [ -n "$why" ]; then echo "SKIP: emulated nodes need network namespaces: $why"; exit 77; fi
if ! command -v python3 >/dev/null 2>&1; then echo "SKIP: python3 (for netblast.py) missing"; exit 77; fi
if ! command -v tc >/dev/null 2>&1; then echo "SKIP: tc (iproute2) missing"; exit 77; fi

RATES=${TEST_RAILS_RATES:-200mbit,100mbit}   # different, so that swapped links show
SECS=${TEST_RAILS_SECONDS:-2}
IFS=, read -r R0 R1 <<<"$RATES"
export EMUNET_ID="st$$"
export EMUNET_OWNER=$$
tmp=$(mktemp -d "${TMPDIR:-/tmp}/strata-emu.$$.XXXXXX")
victim="" victim_id=""
bg=()
cleanup()
{
    local rc=$?
    trap - EXIT INT TERM
    [ ${#bg[@]} -gt 0 ] && kill "${bg[@]}" 2>/dev/null
    [ -n "$victim" ] && kill -KILL "$victim" 2>/dev/null
    emunet_down "$EMUNET_ID"
    [ -n "$victim_id" ] && emunet_down "$victim_id"
    rm -rf "$tmp"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

fails=0
ok()   { echo "ok: $*"; }
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# Namespaces and state of network $1 (empty: nothing left).
leftovers()
{
    ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$1(n[0-9]+|sw[0-9]*)\$" | tr '\n' ' '
    [ -e "$EMUNET_STATE_DIR/$1" ] && echo "$EMUNET_STATE_DIR/$1"
}

# The tbf rate on dev $2 of namespace $1, in bit/s (empty without tbf).
tbf_bps()
{
    local r
    r=$(ip netns exec "$1" tc qdisc show dev "$2" 2>/dev/null |
        awk '$2 == "tbf" { for (i = 3; i < NF; i++) if ($i == "rate") { print $(i + 1); exit } }')
    [ -n "$r" ] && emunet_rate_bps "$r"
}

emunet_cleanup_stale 2>/dev/null

# ---- the default layout is unchanged ------------------------------------------------------
if emunet_up 2 >"$tmp/up1.out"; then
    ifs=$(ip -n "${EMUNET_ID}n0" -o link show | awk -F': ' '{ sub(/@.*/, "", $2); print $2 }' |
          grep -v '^lo$' | tr '\n' ' ')
    if [ "$(wc -l <"$tmp/up1.out")" = 3 ] && [ "$ifs" = "emu0 " ] &&
       ! ip netns list | grep -q "^${EMUNET_ID}sw1"; then
        ok "one link by default: emu0 only, one switch, 3 lines from up"
    else
        fail "default layout: interfaces '$ifs', up printed: $(cat "$tmp/up1.out")"
    fi
else
    fail "emunet_up 2"
fi
emunet_down "$EMUNET_ID"

# ---- two links, a rate each, through the CLI ------------------------------------------------
if ! "$here/emunet.sh" up 2 --links 2 --rate "$RATES" >"$tmp/up.out"; then
    fail "emunet.sh up 2 --links 2 --rate $RATES"; exit 1
fi
cat "$tmp/up.out"
[ "$(wc -l <"$tmp/up.out")" = 4 ] && ok "up prints one line per node and per switch" ||
    fail "up printed $(wc -l <"$tmp/up.out") lines, expected 4"
[ "$(emunet_links)" = 2 ] && ok "state file records 2 links" || fail "state file: $(emunet_links) links"

for k in 0 1; do
    for l in 0 1; do
        want="10.77.$l.$((k + 1))/24"
        got=$(ip -n "${EMUNET_ID}n$k" -o -4 addr show dev "emu$l" 2>/dev/null | awk '{print $4}')
        [ "$got" = "$want" ] && ok "node$k emu$l has $want" || fail "node$k emu$l: '$got', expected $want"
        [ "$(emunet_ip "$k" "$l")" = "${want%/24}" ] || fail "emunet_ip $k $l: $(emunet_ip "$k" "$l")"
    done
done

# Rates: both ends of every link, from tc itself.
for l in 0 1; do
    eval "want=\$R$l"
    want_bps=$(emunet_rate_bps "$want")
    sw=$(emunet_switch_ns "$l")
    for k in 0 1; do
        a=$(tbf_bps "${EMUNET_ID}n$k" "emu$l") b=$(tbf_bps "$sw" "p$k")
        if [ "$a" = "$want_bps" ] && [ "$b" = "$want_bps" ]; then
            ok "link $l of node$k: tbf $want both ways (emu$l and $sw p$k)"
        else
            fail "link $l of node$k: tbf ${a:-none} / ${b:-none} bit/s, expected $want_bps"
        fi
    done
done

# ---- traffic: each link carries what is sent to its address, at its own rate -----------------
# blast L1 [L2]: one TCP stream node0 -> node1 per link given, all at once, for $SECS s; sets
# mbit[l] (receiver's rate) and got[l] (payload bytes).
declare -a mbit got
blast()
{
    local l port pids=()
    for l in "$@"; do
        port=$((5000 + 10 * l + RANDOM % 10))
        emunet_run 1 python3 "$here/netblast.py" recv "$port" "$(emunet_ip 1 "$l")" \
            >"$tmp/recv$l.out" 2>&1 &
        bg+=($!); pids+=($!)
        emunet_run 0 python3 "$here/netblast.py" send "$(emunet_ip 1 "$l")" "$port" "$SECS" \
            >"$tmp/send$l.out" 2>&1 &
        bg+=($!); pids+=($!)
    done
    wait "${pids[@]}"
    bg=()
    for l in "$@"; do
        mbit[l]=$(awk '/^bytes/ { print $6 }' "$tmp/recv$l.out")
        got[l]=$(awk '/^bytes/ { print $2 }' "$tmp/recv$l.out")
        : "${mbit[l]:=0}" "${got[l]:=0}"
    done
}
within() { awk -v m="$1" -v c="$2" 'BEGIN { exit !(m >= 0.80 * c && m <= 1.05 * c) }'; }
counters() { echo "$(emunet_ifbytes 1 rx 0) $(emunet_ifbytes 1 rx 1)"; }

for l in 0 1; do
    eval "cap=\$R$l"
    cap=$(( $(emunet_rate_bps "$cap") / 1000000 ))
    read -r a0 a1 <<<"$(counters)"
    blast "$l"
    read -r b0 b1 <<<"$(counters)"
    d0=$((b0 - a0)) d1=$((b1 - a1))
    echo "link $l alone: ${mbit[l]} Mbit/s (cap $cap); node1 rx emu0 +$d0 B, emu1 +$d1 B," \
         "payload ${got[l]} B"
    if [ "$l" = 0 ]; then mine=$d0 other=$d1; else mine=$d1 other=$d0; fi
    if [ "${got[l]}" -gt 0 ] && [ "$mine" -ge "${got[l]}" ] && [ "$other" -lt $((got[l] / 100 + 65536)) ]; then
        ok "traffic to 10.77.$l.2 crossed emu$l only"
    else
        fail "traffic to 10.77.$l.2: emu$l +$mine B, other link +$other B, payload ${got[l]} B"
    fi
    within "${mbit[l]}" "$cap" && ok "link $l capped at its own rate: ${mbit[l]} of $cap Mbit/s" ||
        fail "link $l: ${mbit[l]} Mbit/s, cap $cap"
done

# Both links at once: independent, so each keeps its own rate and the sum is the two-link rate.
blast 0 1
c0=$(( $(emunet_rate_bps "$R0") / 1000000 )) c1=$(( $(emunet_rate_bps "$R1") / 1000000 ))
sum=$(awk -v a="${mbit[0]}" -v b="${mbit[1]}" 'BEGIN { printf "%.1f", a + b }')
echo "both links at once: ${mbit[0]} + ${mbit[1]} = $sum Mbit/s (caps $c0 + $c1)"
if within "${mbit[0]}" "$c0" && within "${mbit[1]}" "$c1"; then
    ok "two links at once carry the sum of their rates"
else
    fail "two links at once: ${mbit[0]} / ${mbit[1]} Mbit/s, caps $c0 / $c1"
fi

# The CLI's bytes: by link number and by name, per interface.
by_num=$("$here/emunet.sh" bytes 1 rx 1) by_name=$("$here/emunet.sh" bytes node1 rx emu1)
by0=$("$here/emunet.sh" bytes 1 rx)
if [ -n "$by_num" ] && [ "$by_num" = "$by_name" ] && [ "$by0" != "$by_num" ]; then
    ok "emunet.sh bytes 1 rx 1 = bytes node1 rx emu1 ($by_num), emu0 separate ($by0)"
else
    fail "bytes: link 1 '$by_num', emu1 '$by_name', default '$by0'"
fi

"$here/emunet.sh" down "$EMUNET_ID"
left=$(leftovers "$EMUNET_ID")
[ -z "$left" ] && ok "down removed both switches, both nodes and the state file" ||
    fail "down left: $left"

# ---- failure half-way through up: link 1 cannot be created ---------------------------------
# A 15-character link-0 name is valid; link 1's becomes 16 characters, which the kernel refuses,
# after the switches and node0's first link exist.
if EMUNET_IF=abcdefghijklmno emunet_up 2 1gbit 2 >"$tmp/upfail.out" 2>&1; then
    fail "up with an impossible interface name succeeded"
else
    left=$(leftovers "$EMUNET_ID")
    [ -z "$left" ] && ok "a failed up removes what it had created" || fail "failed up left: $left"
fi
if emunet_up 2 "1gbit,2gbit,3gbit" 2 >/dev/null 2>&1 || emunet_up 2 "1gbit,fast" 2 >/dev/null 2>&1; then
    fail "up accepted 3 rates for 2 links, or a bad rate"
else
    left=$(leftovers "$EMUNET_ID")
    [ -z "$left" ] && ok "bad rate lists are refused before anything is created" ||
        fail "refused up left: $left"
fi

# ---- an owner killed with SIGKILL: cleanup-stale removes both links' switches too ----------
bash -c '. "$1/emunet.sh"; unset EMUNET_OWNER; export EMUNET_ID=st$$
         emunet_up 2 1gbit,500mbit 2 >/dev/null || exit 1
         emunet_run 1 sleep 300 & emunet_run 0 sleep 300 & echo up >"$2"; wait' \
    victim "$here" "$tmp/victim.up" &
victim=$!
victim_id="st$victim"
for _ in $(seq 50); do [ -f "$tmp/victim.up" ] && break; sleep 0.1; done
sleep 0.3
kill -KILL "$victim"
wait "$victim" 2>/dev/null
victim=""
before=$(leftovers "$victim_id")
inside=$(for k in 0 1; do ip netns pids "${victim_id}n$k" 2>/dev/null; done)
"$here/emunet.sh" cleanup-stale
left=$(leftovers "$victim_id")
alive=""
for p in $inside; do kill -0 "$p" 2>/dev/null && alive="$alive $p"; done
if [ -z "$before" ] || ! echo "$before" | grep -q "${victim_id}sw1"; then
    fail "the victim's two-link network was not there to clean (setup): '$before'"
elif [ -n "$left" ] || [ -n "$alive" ]; then
    fail "cleanup-stale left: $left${alive:+ processes$alive}"
else
    ok "cleanup-stale removed a dead owner's two-link network ($before) and its processes"
fi

if [ "$fails" = 0 ]; then echo "PASS"; exit 0; fi
echo "$fails check(s) failed"
exit 1
