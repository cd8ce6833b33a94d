#!/usr/bin/python3
"""Writes OUT/index.h5: a sluice cache index (docs/cache-format.md) of N synthetic samples, laid out
as cache/cache_index.cpp writes it (one chunked column per field, ~64 KiB chunks, fletcher32 on
the fixed-size ones),
for bench_plan's start-up measurement of reading an index of a cluster-sized corpus.

    bench/plan/make_index.py N OUT
"""
import os
import sys

import h5py
import numpy as np

n, out = int(sys.argv[1]), sys.argv[2]
os.makedirs(out, exist_ok=True)
rng = np.random.default_rng(7)
frames = rng.integers(100, 2100, n, dtype=np.int32)   # LibriTTS-like lengths
shard_size = 256
with h5py.File(os.path.join(out, "index.h5"), "w") as f:
    def column(name, values):
        rows = max(1, min(len(values), 64 * 1024 // values.dtype.itemsize))
        f.create_dataset(name, data=values, chunks=(rows,), fletcher32=True)
    # ids like LibriTTS's: speaker_chapter_utterance
    ids = np.array([f"{1000 + i % 2311}_{i // 50:06d}_{i:08d}" for i in range(n)], dtype=object)
    rows = max(1, min(n, 64 * 1024 // 16))
    f.create_dataset("id", data=ids, dtype=h5py.string_dtype("utf-8"), chunks=(rows,))
    column("shard", (np.arange(n) // shard_size).astype(np.uint32))
    column("row", (np.arange(n) % shard_size).astype(np.uint32))
    column("n_frames", frames)
    column("n_tokens", (frames // 6 + 3).astype(np.int32))
    column("seconds", (frames * 256 / 22050).astype(np.float32))
    column("language", np.zeros(n, dtype=np.uint16))
    column("speaker", (np.arange(n) % 2311).astype(np.uint32))
    f.attrs["format"] = "sluice-index"
    f.attrs["format_version"] = np.int64(1)
    f.attrs["fingerprint"] = "0" * 32
    f.attrs["n_mels"] = np.int64(80)
    f.attrs["strings_xxh64"] = "0" * 16
print(os.path.join(out, "index.h5"), os.path.getsize(os.path.join(out, "index.h5")), "bytes")
