#!/usr/bin/env python3
"""
repeat_shard.py - an llm.c token shard whose tokens are another's, repeated: enough tokens for
runs whose step wants more than the shipped data has. Tiny Shakespeare's train shard holds
305,260 tokens; a step of B = 64, T = 1024 on 8 processes reads 524,288 (plus one), so the
8-GPU scaling runs train on this shard repeated. Throughput only: a repeated text
teaches nothing new.

    python3 scripts/repeat_shard.py IN OUT TIMES
    e.g. python3 scripts/repeat_shard.py data/tiny_shakespeare_train.bin /tmp/ts_x8.bin 8

The header (256 int32: magic, version, token count) is llm.c's (llmc/shard.h): GPT-2 shards
(magic 20240520, version 1, uint16 tokens) and Llama-3 ones (20240801, version 7, uint32); the
input's is checked the way the trainer checks it, the output gets the same magic and version and
the new count (which must fit int32). The output is written to OUT.tmp and renamed: never
half-written.
"""
import os
import struct
import sys

HEADER_INTS = 256
KINDS = {20240520: (1, 2), 20240801: (7, 4)}  # magic: (version, bytes per token)


def fail(msg):
    print("repeat_shard: " + msg, file=sys.stderr)
    sys.exit(1)


def main(argv):
    if len(argv) != 4:
        fail("usage: repeat_shard.py IN OUT TIMES")
    src, dst, times = argv[1], argv[2], argv[3]
    try:
        times = int(times)
    except ValueError:
        fail("TIMES must be an integer, got %r" % times)
    if times < 1:
        fail("TIMES must be >= 1, got %d" % times)
    try:
        with open(src, "rb") as f:
            data = f.read()
    except OSError as e:
        fail("cannot read %s: %s" % (src, e))
    if len(data) < HEADER_INTS * 4:
        fail("%s: %d bytes, shorter than the 1024-byte header" % (src, len(data)))
    header = list(struct.unpack("<%di" % HEADER_INTS, data[:HEADER_INTS * 4]))
    magic, version, ntok = header[0], header[1], header[2]
    if magic not in KINDS:
        fail("%s: bad magic %d (expected 20240520 or 20240801)" % (src, magic))
    want_version, tok_bytes = KINDS[magic]
    if version != want_version:
        fail("%s: version %d, expected %d for magic %d" % (src, version, want_version, magic))
    if ntok < 1 or len(data) != HEADER_INTS * 4 + ntok * tok_bytes:
        fail("%s: header says %d tokens of %d bytes, the file holds %d bytes after the header"
             % (src, ntok, tok_bytes, len(data) - HEADER_INTS * 4))
    total = ntok * times
    if total > 2**31 - 1:
        fail("%d tokens x %d = %d does not fit the header's int32 count" % (ntok, times, total))
    header[2] = total
    tokens = data[HEADER_INTS * 4:]
    tmp = dst + ".tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(struct.pack("<%di" % HEADER_INTS, *header))
            for _ in range(times):
                f.write(tokens)
        os.replace(tmp, dst)
    except OSError as e:
        fail("cannot write %s: %s" % (dst, e))
    print("repeat_shard: %s: %d tokens (%s x %d)" % (dst, total, src, times))


if __name__ == "__main__":
    main(sys.argv)
