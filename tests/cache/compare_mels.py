"""Compares two caches of one corpus, float32 (A) and float16 (B), with h5py only: prints B's
/mel dtype and the error of B's mels against A's (max relative where |a| >= 2^-14, max and mean
absolute, per-bin mean shift). Used by tests/runtime/test_float16_cache.cpp and for the numbers
in docs/cache-format.md.

    compare_mels.py CACHE_FLOAT32 CACHE_FLOAT16
"""
import glob
import sys

import h5py
import numpy as np


def mels(cache):
    files = sorted(glob.glob(cache + "/shard-*.h5"))
    with h5py.File(files[0], "r") as f:
        dtype = f["mel"].dtype
    return dtype, np.concatenate([h5py.File(name, "r")["mel"][()] for name in files])


def main(full, half):
    _, a = mels(full)
    dtype, b = mels(half)
    if a.shape != b.shape:
        sys.exit(f"the caches differ in shape: {a.shape} and {b.shape}")
    b = b.astype(np.float32)
    error = np.abs(b - a)
    normal = np.abs(a) >= 2.0 ** -14
    relative = (error[normal] / np.abs(a[normal])).max()
    print(f"dtype {dtype}")
    print(f"values {a.size}, range {a.min():.6f} .. {a.max():.6f}")
    print(f"max relative error {relative:.6e}")
    print(f"max absolute error {error.max():.6e}, mean {error.mean():.6e}")
    print(f"largest per-bin mean shift {np.abs(b.mean(axis=0) - a.mean(axis=0)).max():.6e}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
