#!/usr/bin/env python3
"""netblast: a minimal TCP throughput probe for the emulated links (no iperf on the test machine).

  netblast.py recv PORT [BIND]          accept one connection, count bytes until EOF, print
                                        "bytes <n> seconds <t> mbit/s <r>" and exit
  netblast.py send HOST PORT SECONDS    stream zeros for SECONDS, print the same line
The receiver's number is the one to trust: it counts what arrived, from first byte to EOF.
"""
import socket
import sys
import time


def report(nbytes, seconds):
    print("bytes %d seconds %.3f mbit/s %.1f" % (nbytes, seconds, nbytes * 8 / seconds / 1e6),
          flush=True)


def recv(port, bind="0.0.0.0"):
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((bind, port))
    srv.listen(1)
    print("listening", flush=True)
    conn, _ = srv.accept()
    buf = bytearray(1 << 20)
    view = memoryview(buf)
    n = conn.recv_into(view)
    start = time.monotonic()   # from the first byte: connection setup is not bandwidth
    total = 0
    while n > 0:
        n = conn.recv_into(view)
        total += n
    report(total, max(time.monotonic() - start, 1e-9))


def send(host, port, seconds):
    sock = None
    deadline = time.monotonic() + 10
    while sock is None:   # the receiver may still be starting
        try:
            sock = socket.create_connection((host, port), timeout=10)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    buf = bytes(1 << 18)
    total = 0
    start = time.monotonic()
    end = start + seconds
    while time.monotonic() < end:
        total += sock.send(buf)
    sock.shutdown(socket.SHUT_WR)
    sock.close()
    report(total, time.monotonic() - start)


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "recv":
        recv(int(sys.argv[2]), *(sys.argv[3:4]))
    elif len(sys.argv) == 5 and sys.argv[1] == "send":
        send(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
    else:
        sys.exit(__doc__)
