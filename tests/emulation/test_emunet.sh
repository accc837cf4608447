#!/bin/bash
# test_emunet.sh: checks the node emulation itself (emunet.sh), no strata needed:
#   UTS hostnames per node, connectivity over the bridge, tc tbf caps measured with a TCP stream,
#   every link operationally up (carrier on) when `up` returns, with one link or three per node,
#   a link that never comes up named (and the network removed) within EMUNET_UP_TIMEOUT,
#   `link K L down|up`,
#   the links' MTU (9000 on every hop, out-of-range values refused),
#   the link byte counters, `down` leaving nothing behind, and `cleanup-stale` removing what an
#   owner killed with SIGKILL left (namespaces, processes inside them).
# Exit 0 pass, 1 fail, 77 skip (not root, no network namespaces).
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=emunet.sh
. "$here/emunet.sh"

why=$(emunet_unavailable)
if [ -n "$why" ]; then echo "SKIP: emulated nodes need network namespaces: $why"; exit 77; fi
if ! command -v python3 >/dev/null 2>&1; then echo "SKIP: python3 (for netblast.py) missing"; exit 77; fi

RATE=${TEST_EMUNET_RATE:-200mbit}
SECONDS_PER_RUN=${TEST_EMUNET_SECONDS:-2}
export EMUNET_ID="st$$"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/strata-emu.$$.XXXXXX")
victim=""
cleanup()
{
    local rc=$?
    trap - EXIT INT TERM
    [ -n "$victim" ] && kill -KILL "$victim" 2>/dev/null
    emunet_down "$EMUNET_ID"
    emunet_down "st${victim:-none}"
    rm -rf "$tmp"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

fails=0
ok()   { echo "ok: $*"; }
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

emunet_cleanup_stale 2>/dev/null

# One TCP stream node0 -> node1 for SECONDS_PER_RUN; prints the receiver's mbit/s.
blast()
{
    local port=$((5000 + RANDOM % 1000)) out
    emunet_run 1 python3 "$here/netblast.py" recv "$port" >"$tmp/recv.out" 2>&1 &
    local rpid=$!
    emunet_run 0 python3 "$here/netblast.py" send "$(emunet_ip 1)" "$port" "$SECONDS_PER_RUN" \
        >"$tmp/send.out" 2>&1
    wait "$rpid"
    out=$(awk '/^bytes/ { print $6 }' "$tmp/recv.out")
    echo "${out:-0}"
}

# ---- unshaped --------------------------------------------------------------------------------
if ! emunet_up 2 >"$tmp/up.out"; then fail "emunet_up 2"; exit 1; fi
cat "$tmp/up.out"
[ "$(wc -l <"$tmp/up.out")" = 3 ] && ok "up prints one line per node and the switch" ||
    fail "up output: $(cat "$tmp/up.out")"

h0=$(emunet_run 0 hostname) h1=$(emunet_run node1 hostname)
if [ "$h0" = node0 ] && [ "$h1" = node1 ] && [ "$(hostname)" != node0 ]; then
    ok "UTS hostnames node0, node1 (host keeps $(hostname))"
else
    fail "hostnames: '$h0' '$h1' (host '$(hostname)')"
fi

if emunet_run 0 python3 -c "import socket,sys; s=socket.socket(); s.settimeout(3)
try: s.connect(('$(emunet_ip 1)', 9))
except ConnectionRefusedError: sys.exit(0)
sys.exit(1)"; then
    ok "node0 reaches node1 over the bridge (connection refused by node1's stack)"
else
    fail "node0 cannot reach $(emunet_ip 1)"
fi

rx_before=$(emunet_ifbytes 1 rx) tx_before=$(emunet_ifbytes 0 tx)
mbit=$(blast)
rx_after=$(emunet_ifbytes 1 rx) tx_after=$(emunet_ifbytes 0 tx)
got=$(awk '/^bytes/ { print $2 }' "$tmp/recv.out")
echo "unshaped: ${mbit} Mbit/s; node1 rx +$((rx_after - rx_before)) B, node0 tx" \
     "+$((tx_after - tx_before)) B, payload ${got:-0} B"
if [ -n "$got" ] && [ $((rx_after - rx_before)) -ge "$got" ] &&
   [ $((tx_after - tx_before)) -ge "$got" ]; then
    ok "byte counters account for the payload"
else
    fail "byte counters below the payload"
fi
emunet_down "$EMUNET_ID"
if ip netns list | grep -q "^$EMUNET_ID"; then fail "down left namespaces"; else ok "down"; fi

# ---- links up when `up` returns (the kernel raises a veth's carrier asynchronously) --
# all_links_up ID NODES LINKS: every node interface, switch port and bridge is up right now.
all_links_up()
{
    local id=$1 n=$2 nl=$3 k l st
    for ((l = 0; l < nl; l++)); do
        st=$(emunet_link_state "$(emunet_switch_ns "$l" "$id")" br0)
        [ "$st" = up ] || { echo "br0 of link $l: $st"; return 1; }
        for ((k = 0; k < n; k++)); do
            st=$(emunet_link_state "${id}n$k" "$(emunet_ifname "$l")")
            [ "$st" = up ] || { echo "node$k $(emunet_ifname "$l"): $st"; return 1; }
            st=$(emunet_link_state "$(emunet_switch_ns "$l" "$id")" "p$k")
            [ "$st" = up ] || { echo "port p$k of link $l: $st"; return 1; }
        done
    done
}
for round in 1 2 3; do
    emunet_up 3 "" 3 >/dev/null || { fail "emunet_up 3 --links 3"; break; }
    if why=$(all_links_up "$EMUNET_ID" 3 3); then
        [ "$round" = 3 ] && ok "3 nodes x 3 links: every link up when up returned (3 rounds)"
    else
        fail "round $round: up returned with a link not up: $why"; emunet_down "$EMUNET_ID"; break
    fi
    emunet_down "$EMUNET_ID"
done
emunet_up 2 "" 2 >/dev/null || fail "emunet_up 2 --links 2"
emunet_link_set 1 1 down
st=$(emunet_link_state "${EMUNET_ID}n1" emu1)
if [ "$st" != up ] && emunet_link_set 1 1 up && all_links_up "$EMUNET_ID" 2 2 >/dev/null; then
    ok "link 1 of node1 down ($st), then up again when link_set up returned"
else
    fail "link_set down/up: state after down '$st', after up: $(all_links_up "$EMUNET_ID" 2 2)"
fi
emunet_down "$EMUNET_ID"
start=$(date +%s)
if EMUNET_FAULT_PORT_DOWN=1/1 EMUNET_UP_TIMEOUT=3 emunet_up 2 "" 2 >/dev/null 2>"$tmp/fault.err"
then
    fail "up returned 0 with a switch port held down"
    emunet_down "$EMUNET_ID"
elif ! grep -q "link p1 of namespace ${EMUNET_ID}sw1 never came up within 3 s: DOWN" \
        "$tmp/fault.err"; then
    fail "a link that never came up is not named: $(cat "$tmp/fault.err")"
elif ip netns list | grep -q "^$EMUNET_ID"; then
    fail "a failed up left namespaces: $(ip netns list | grep "^$EMUNET_ID" | tr '\n' ' ')"
else
    ok "a link that never came up is named after $(( $(date +%s) - start )) s, nothing left:" \
       "$(grep 'never came up' "$tmp/fault.err")"
fi

# ---- tbf cap ----------------------------------------------------------------------------------
emunet_up 2 "$RATE" >/dev/null || { fail "emunet_up 2 $RATE"; exit 1; }
cap=$(( $(emunet_rate_bps "$RATE") / 1000000 ))
mbit=$(blast)
echo "tbf $RATE: ${mbit} Mbit/s measured"
if awk -v m="$mbit" -v c="$cap" 'BEGIN { exit !(m >= 0.80 * c && m <= 1.05 * c) }'; then
    ok "tbf caps the link: $mbit of $cap Mbit/s"
else
    fail "tbf: $mbit Mbit/s measured, cap $cap"
fi
emunet_down "$EMUNET_ID"

# ---- MTU ---------------------------------------------------------------------------------------
if emunet_up 2 "" 1 70000 >/dev/null 2>&1; then fail "MTU 70000 accepted"; emunet_down "$EMUNET_ID"
else ok "MTU 70000 refused"; fi
if emunet_up 2 "" 1 9000 >/dev/null; then
    m0=$(ip netns exec "${EMUNET_ID}n0" cat "/sys/class/net/$EMUNET_IF/mtu")
    mp=$(ip netns exec "${EMUNET_ID}sw" cat /sys/class/net/p1/mtu)
    mb=$(ip netns exec "${EMUNET_ID}sw" cat /sys/class/net/br0/mtu)
    # An 8000-byte UDP datagram sent with "don't fragment" arrives whole only if every hop
    # takes it (python: no ping on the test machines).
    emunet_run 1 python3 -c 'import socket,sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("0.0.0.0", 5999)); s.settimeout(5)
print(len(s.recv(65536)))' >"$tmp/dgram.out" 2>&1 &
    rpid=$!
    sleep 0.5
    emunet_run 0 python3 -c 'import socket,sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.IPPROTO_IP, 10, 2)  # IP_MTU_DISCOVER = IP_PMTUDISC_DO
s.sendto(bytes(8000), (sys.argv[1], 5999))' "$(emunet_ip 1)" 2>"$tmp/dgram.err"
    wait "$rpid"
    if [ "$m0/$mp/$mb" = 9000/9000/9000 ] && [ "$(cat "$tmp/dgram.out")" = 8000 ]; then
        ok "MTU 9000 on node, switch port and bridge; an 8000-byte datagram crossed unfragmented"
    else
        fail "MTU 9000: node $m0, port $mp, bridge $mb; datagram: $(cat "$tmp/dgram.out" "$tmp/dgram.err")"
    fi
    emunet_down "$EMUNET_ID"
else
    fail "emunet_up 2 with MTU 9000"
fi

# ---- an owner killed with SIGKILL --------------------------------------------------------------
bash -c '. "$1/emunet.sh"; export EMUNET_ID=st$$; emunet_up 2 >/dev/null || exit 1
         emunet_run 1 sleep 300 & emunet_run 0 sleep 300 & echo up >"$2"; wait' \
    victim "$here" "$tmp/victim.up" &
victim=$!
for _ in $(seq 50); do [ -f "$tmp/victim.up" ] && break; sleep 0.1; done
sleep 0.3
kill -KILL "$victim"
wait "$victim" 2>/dev/null
left=$(ip netns list | grep -c "^st${victim}")
inside=$(for k in 0 1; do ip netns pids "st${victim}n$k" 2>/dev/null; done)
echo "after SIGKILL of owner $victim: $left namespaces, processes inside:" $inside
if "$here/emunet.sh" list | grep -qx "st$victim stale"; then ok "list reports st$victim stale"
else fail "list does not report st$victim stale"; fi
"$here/emunet.sh" cleanup-stale
alive=""
for p in $inside; do kill -0 "$p" 2>/dev/null && alive="$alive $p"; done
if ip netns list | grep -q "^st${victim}"; then
    fail "cleanup-stale left $(ip netns list | grep "^st${victim}" | tr '\n' ' ')"
elif [ -z "$inside" ]; then
    fail "no processes were running in the victim's nodes (test setup)"
elif [ -n "$alive" ]; then
    fail "cleanup-stale left processes$alive"
else
    ok "cleanup-stale removed the dead owner's network and processes"
fi
[ -f "$EMUNET_STATE_DIR/st$victim" ] && fail "state file st$victim left"
victim=""

if [ "$fails" = 0 ]; then echo "PASS"; exit 0; fi
echo "$fails check(s) failed"
exit 1
