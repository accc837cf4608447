#!/usr/bin/env python3
"""make_seeds.py - writes the seed corpus of the fuzz harnesses into corpus/<harness>/ (run from
tests/fuzz/). The seeds are committed; this script documents what each one is and remakes them
after a wire-format change. Layouts: src/core/bootstrap.h (hello, reply), bootstrap_wire.c (the id),
src/topo/topo.h (st_topo_rec_t, little-endian host layout)."""
import os
import struct

WIRE_MAGIC = 0x53544253
ID_MAGIC = 0x53544944
SECRET = b"\x5a" * 16  # fuzz_root's root uses this secret


def hello(rank, nranks, blob_len, secret=SECRET, version=1, magic=WIRE_MAGIC):
    return struct.pack(">II", magic, version) + secret + struct.pack(">III", rank, nranks, blob_len)


def reply(status, nranks, blob_len, msg=b""):
    return struct.pack(">IIIII", WIRE_MAGIC, status, nranks, blob_len, len(msg)) + msg


def uid(family, port, addr, from_env=0, scope=0):
    b = struct.pack(">II", ID_MAGIC, 1) + bytes(range(16)) + struct.pack(">IHH", from_env, family,
                                                                          port)
    b += addr.ljust(16, b"\0") + struct.pack(">I", scope)
    return b.ljust(128, b"\0")


def rec(nic, near, cpus, numas, numa, gpu_numa, first_pu, ncores, flags=0, gpu=b""):
    return (b"n".ljust(64, b"\0") + gpu.ljust(16, b"\0") + nic.ljust(32, b"\0") +
            near.ljust(128, b"\0") + cpus.ljust(64, b"\0") + numas.ljust(64, b"\0") +
            struct.pack("<iiiII", numa, gpu_numa, first_pu, ncores, flags))


def write(harness, name, data):
    os.makedirs(os.path.join("corpus", harness), exist_ok=True)
    with open(os.path.join("corpus", harness, name), "wb") as f:
        f.write(data)


# fuzz_wire: first byte picks the parser (0 id, 1 hello, 2 reply, 3 strings)
write("fuzz_wire", "id-v4", b"\0" + uid(4, 4242, bytes([127, 0, 0, 1])))
write("fuzz_wire", "id-v6-env", b"\0" + uid(6, 80, b"\xfe\x80" + b"\0" * 13 + b"\1", 1, 2))
write("fuzz_wire", "hello-ok", b"\1" + hello(1, 4, 64))
write("fuzz_wire", "hello-big-blob", b"\1" + hello(0, 4, 0xffffffff))
write("fuzz_wire", "reply-ok", b"\2" + reply(0, 4, 64))
write("fuzz_wire", "reply-reject", b"\2" + reply(2, 4, 64, b"wrong secret"))
write("fuzz_wire", "addr-v4", b"\3127.0.0.1:4242")
write("fuzz_wire", "addr-v6", b"\3[fe80::1%2]:80")
write("fuzz_wire", "ifname", b"\3^=docker0,eth,ib")

# fuzz_root: first byte % 3 + 1 connections, the rest cut in equal parts (nranks 4)
blob = bytes(range(8))
write("fuzz_root", "rank1", b"\0" + hello(1, 4, 8) + blob)
write("fuzz_root", "rank0-twice", b"\1" + (hello(0, 4, 8) + blob) * 2)
write("fuzz_root", "three-ranks", b"\2" + hello(0, 4, 8) + blob + hello(1, 4, 8) + blob +
      hello(2, 4, 8) + blob)
write("fuzz_root", "wrong-secret-garbage", b"\2" + hello(3, 4, 8, secret=b"\1" * 16) + blob +
      b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".ljust(44, b"A") + hello(3, 4, 8) + blob)
write("fuzz_root", "no-secret", b"\0" + struct.pack(">II", WIRE_MAGIC, 1))
write("fuzz_root", "blob-too-big", b"\0" + hello(0, 4, 65537))
write("fuzz_root", "nranks-3", b"\0" + hello(0, 3, 8) + blob)
write("fuzz_root", "version-2", b"\0" + hello(0, 4, 8, version=2) + blob)
write("fuzz_root", "extra-bytes", b"\0" + hello(2, 4, 8) + blob + b"more")

# fuzz_records: first byte n-1, then per rank a node selector byte and its record
r4 = b"".join(bytes([k // 2]) + rec(b"mlx5_%d" % (k % 2), b"mlx5_0,mlx5_1", b"%d-%d" % (4 * k, 4 * k + 3),
                                    b"%d" % (k % 2), k % 2, -1, 4 * k, 4) for k in range(4))
write("fuzz_records", "2x2", b"\3" + r4)
r3 = b"".join(bytes([0]) + rec(b"", b"", b"0-63", b"0-1", -1, -1, -1, 0, 1) for k in range(3))
write("fuzz_records", "one-node-spread", b"\2" + r3)
write("fuzz_records", "rr2", b"\5" + b"".join(bytes([k % 2]) + rec(b"ib%d" % k, b"", b"", b"", 0,
                                                                    0, k, 1) for k in range(6)))
