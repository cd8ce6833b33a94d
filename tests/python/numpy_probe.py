"""A Python model rank that imports no torch (test_python_ranks.py, NumPy only): takes its batches
with numpy.from_dlpack of the feed's DLPack producers, checks every batch's mels against the
cache's own (read with h5py, normalised here with the manifest's statistics as sluice normalises
them), trains a tiny NumPy model (each mel frame predicted from the one before, per bin) and
records what it saw. At the end torch must not be in the process.

    numpy_probe.py OUT CACHE_DIR [KEY=VALUE ...]

With KEY=VALUE overrides the script runs alone (no mpirun: one process feeds itself, the data
side on a thread of this process) with them as its config; without, it is a rank of a
`sluice train` job and takes rank 0's.
"""
import json
import os
import sys

import h5py
import numpy as np

import sluice

out, cache_dir, overrides = sys.argv[1], sys.argv[2], sys.argv[3:]


class CacheMels:
    """A sample's mels as the cache holds them (docs/cache-format.md), normalised as
    train.normalize_mels does: (x - mean) * (1 / max(std, 1e-4)), in float32."""

    def __init__(self, directory):
        self.directory = directory
        with h5py.File(os.path.join(directory, "index.h5"), "r") as index:
            self.shard, self.row = index["shard"][:], index["row"][:]
        with open(os.path.join(directory, "manifest.json")) as file:
            statistics = json.load(file)["mel_statistics"]
        self.mean = np.array(statistics["mean"], dtype=np.float32)
        self.inverse = np.float32(1) / np.maximum(np.array(statistics["std"], dtype=np.float32), np.float32(1e-4))
        self.files = {}

    def __call__(self, sample):
        shard = int(self.shard[sample])
        if shard not in self.files:
            self.files[shard] = h5py.File(os.path.join(self.directory, f"shard-{shard:05d}.h5"), "r")
        file, row = self.files[shard], int(self.row[sample])
        start, end = file["mel_offsets"][row], file["mel_offsets"][row + 1]
        return (file["mel"][start:end] - self.mean) * self.inverse


def matches_cache(batch, cache):
    """Whether every sample's valid frames are the cache's, bit for bit, and its padding is zero."""
    mels = np.from_dlpack(batch.dlpack("mels"))
    lens = np.from_dlpack(batch.dlpack("mel_lens"))
    indices = np.from_dlpack(batch.dlpack("indices"))
    assert mels.dtype == np.float32 and mels.shape[0] == batch.size == len(indices), mels.shape
    return all(np.array_equal(mels[b, :lens[b]], cache(int(indices[b]))) and not mels[b, lens[b]:].any()
               for b in range(batch.size))


class NextFrame:
    """x[t + 1] ~ scale * x[t] + shift per mel bin: least squares by gradient descent."""

    def __init__(self, n_mels):
        self.scale, self.shift = np.zeros(n_mels, np.float32), np.zeros(n_mels, np.float32)

    def step(self, mels, lens, lr=0.05):
        valid = (np.arange(mels.shape[1] - 1)[None, :] < (lens[:, None] - 1))[..., None]
        now, after = mels[:, :-1], mels[:, 1:]
        error = (self.scale * now + self.shift - after) * valid
        count = max(int(valid.sum()) * mels.shape[2], 1)
        self.scale -= lr * 2 * (error * now).sum(axis=(0, 1)) / count * mels.shape[2]
        self.shift -= lr * 2 * error.sum(axis=(0, 1)) / count * mels.shape[2]
        return float((error ** 2).sum() / count)


cache = CacheMels(cache_dir)
feed = sluice.Feed(overrides=overrides)
model = NextFrame(feed.n_mels)
record = {"rank": feed.rank, "steps": [], "mels_equal": [], "losses": [], "validation_equal": []}
for batch in feed:
    record["steps"].append(batch.global_step)
    record["mels_equal"].append(matches_cache(batch, cache))
    loss = model.step(np.from_dlpack(batch.dlpack("mels")), np.from_dlpack(batch.dlpack("mel_lens")))
    record["losses"].append(loss)
    feed.loss(loss)
# The validation batches are read and normalised in this process (sluice's normaliser on the host).
for vbatch in feed.validation():
    record["validation_equal"].append(matches_cache(vbatch, cache))
record["exit"] = feed.close()
record["torch_imported"] = "torch" in sys.modules
with open(out.format(rank=record["rank"]), "w") as file:
    json.dump(record, file)
assert "torch" not in sys.modules, "the feed imported torch"
