"""Which library decompresses Kafka record batches faster: kafka-python's own codec functions (over
the libraries of its extras: lz4, python-snappy, zstandard; gzip from the standard library), or
cramjam, one library covering all four?

The payload is what a producer puts in one batch: 1 MiB of records (keys, headers, 100-byte to
1 KiB values from a fixed seed, text-like so that it compresses as real topics do), compressed the
way librdkafka frames each codec (gzip, xerial-framed snappy as Kafka's Java/librdkafka producers
write it, LZ4 frame, zstd frame). Each figure is decompressed MB/s of output; the ratio compares
kafka-python's path with cramjam's on the same bytes.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

MIB = 1 << 20


def payload(nbytes: int) -> bytes:
    rng = np.random.default_rng(common.SEED)
    words = [b"order", b"user", b"item", b"price", b"EUR", b"shipped", b"pending", b"warehouse", b"id"]
    out = bytearray()
    i = 0
    while len(out) < nbytes:
        n = int(rng.integers(100, 1024))
        picks = rng.integers(0, len(words), size=n // 6)
        out += b"key-%d\x00trace\x00" % i + b" ".join(words[p] for p in picks)[:n] + b"%d" % rng.integers(1 << 40)
        i += 1
    return bytes(out[:nbytes])


def timed(fn, data: bytes, runs: int, size: int) -> list[float]:
    fn(data)                                   # warm-up
    rates = []
    for _ in range(runs):
        t0 = time.perf_counter()
        reps = 0
        while time.perf_counter() - t0 < 0.2:
            fn(data)
            reps += 1
        rates.append(size * reps / (time.perf_counter() - t0) / 1e6)
    return rates


def main(argv: list[str] | None = None) -> int:
    args = common.parser(__doc__.splitlines()[0]).parse_args(argv)
    runs = common.runs_of(args, quick_default=3)
    rep = common.Report("codecs", args)
    import cramjam
    from kafka import codec as kc

    size = (MIB // 4) if args.quick else MIB
    raw = payload(size)
    rep.params = {"payload_bytes": size, "runs": runs}
    compressed = {"gzip": kc.gzip_encode(raw), "snappy": kc.snappy_encode(raw, xerial_compatible=True),
                  "lz4": kc.lz4_encode(raw), "zstd": kc.zstd_encode(raw)}
    kafka_python = {"gzip": kc.gzip_decode, "snappy": kc.snappy_decode, "lz4": kc.lz4_decode,
                    "zstd": kc.zstd_decode}

    def cramjam_snappy(data: bytes) -> bytes:
        # xerial framing: a 16-byte header, then (4-byte length, raw snappy block) chunks
        out, pos = bytearray(), 16
        while pos < len(data):
            n = int.from_bytes(data[pos:pos + 4], "big")
            out += bytes(cramjam.snappy.decompress_raw(data[pos + 4:pos + 4 + n]))
            pos += 4 + n
        return bytes(out)

    crj = {"gzip": lambda d: bytes(cramjam.gzip.decompress(d)), "snappy": cramjam_snappy,
           "lz4": lambda d: bytes(cramjam.lz4.decompress(d)), "zstd": lambda d: bytes(cramjam.zstd.decompress(d))}
    for codec, data in compressed.items():
        assert kafka_python[codec](data) == raw == crj[codec](data), codec
        rep.params[f"{codec}.compressed_bytes"] = len(data)
        rep.add(f"{codec}.kafka_python.mb_per_s", timed(kafka_python[codec], data, runs, size), "MB/s")
        rep.add(f"{codec}.cramjam.mb_per_s", timed(crj[codec], data, runs, size), "MB/s")
        rep.ratio(f"{codec}.ratio.kafka_python_vs_cramjam", f"{codec}.kafka_python.mb_per_s",
                  f"{codec}.cramjam.mb_per_s")
    rep.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
