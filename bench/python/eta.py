"""η of a Python model rank (docs/performance.md): samples/s of a training step fed by sluice ÷
samples/s of the same step on the same batches replayed from memory, in the same script; beside
it the same step fed by a torch.utils.data.DataLoader reading the same cache with h5py, at its
best num_workers, each of its steps interleaved with the replay as the fed steps are (its own η).
Beside them, when the data rank runs on this host, its CPU seconds (from /proc) in each phase:
the fed steps after the warm-up (per batch), the close, the replay's own pass and the
DataLoader passes (where it only waits for this rank's end).
A benchmark, not a test: it prints numbers and asserts nothing.

    mpirun -np 1 sluice train --cache CACHE --run-dir RUN --steps N --set train.batch_size=16 ... \
        : -np 1 python3 bench/python/eta.py --cache CACHE     # PYTHONPATH=BUILD/python (or sluice-python)
"""
import argparse
import importlib.util
import json
import os
import time

import h5py
import numpy as np
import torch

import sluice

spec = importlib.util.spec_from_file_location(
    "python_tts", os.path.join(os.path.dirname(__file__), "..", "..", "examples", "python_tts", "train.py"))
example = importlib.util.module_from_spec(spec)
spec.loader.exec_module(example)

parser = argparse.ArgumentParser()
parser.add_argument("--cache", required=True)
parser.add_argument("--warmup", type=int, default=5)
parser.add_argument("--workers", default="0,1,2")
args = parser.parse_args()
torch.manual_seed(0)
torch.set_num_threads(1)

feed = sluice.Feed()
# cuda:N when the run's model.device is cuda: batches then arrive in GPU memory (cuda_ipc), the
# replayed copies stay there, and the DataLoader's batches are copied there inside their step.
device = feed.device
model = example.TinyTTS(feed.vocab_size, feed.n_mels).to(device)


def data_rank_pid():
    """The sluice data rank of this job when it runs on this host: the `sluice` process whose
    command line names this run's directory (not mpirun, whose command line names it too)."""
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as file:
                argv = file.read().decode(errors="replace").split("\0")
        except OSError:
            continue
        if os.path.basename(argv[0]) == "sluice" and "train" in argv and feed.run_dir in argv:
            return int(pid)
    return None


def cpu_seconds(pid):
    """User + system CPU seconds of process `pid` (all its threads) so far, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as file:
            fields = file.read().rsplit(")", 1)[1].split()
    except (OSError, TypeError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class DataRankCpu:
    """The data rank's CPU seconds and wall seconds between marks (phases of this benchmark)."""

    def __init__(self):
        self.pid, self.marks = data_rank_pid(), []

    def mark(self, name):
        self.marks.append((name, time.perf_counter(), cpu_seconds(self.pid)))

    def phases(self):
        out = {}
        for (_, t0, c0), (name, t1, c1) in zip(self.marks, self.marks[1:]):
            if c0 is not None and c1 is not None:
                out[name] = {"wall_s": t1 - t0, "cpu_s": c1 - c0, "cores": (c1 - c0) / max(t1 - t0, 1e-9)}
        return out


data_rank = DataRankCpu()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)


def step(tokens, token_lens, mels, mel_lens):
    if tokens.device != device:  # a DataLoader's batch (pinned when on a GPU)
        tokens, token_lens, mels, mel_lens = (x.to(device, non_blocking=True) for x in (tokens, token_lens, mels, mel_lens))
    loss = example.masked_l1(model(tokens, token_lens, mel_lens, mels.size(1)), mels, mel_lens)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # each step's time is its GPU work, as on the CPU


# 1. Fed by sluice, interleaved with 2a: after each fed step, the same step on the same batch
#    from memory, so that both see the same load on a shared machine. The copy is not timed.
kept, timed, samples, interleaved = [], 0.0, 0, 0.0
start = time.perf_counter()
if args.warmup == 0:
    data_rank.mark("start")
for i, batch in enumerate(feed):
    step(batch.tokens, batch.token_lens, batch.mels, batch.mel_lens)
    now = time.perf_counter()
    if i >= args.warmup:
        timed += now - start
        samples += batch.size
    kept.append((batch.tokens.clone(), batch.token_lens.clone(), batch.mels.clone(), batch.mel_lens.clone(),
                 batch.indices.tolist()))
    replay_start = time.perf_counter()
    step(*kept[-1][:4])
    if i >= args.warmup:
        interleaved += time.perf_counter() - replay_start
    if i == args.warmup - 1:
        data_rank.mark("start")  # outside the timed steps
    start = time.perf_counter()
data_rank.mark("feed")  # the fed steps after the warm-up (and their interleaved replays)
timed_batches = len(kept) - args.warmup
fed = samples / timed
replayed_interleaved = samples / interleaved


def timed_pass(batches):
    total, count = 0.0, 0
    start = time.perf_counter()
    for i, (tokens, token_lens, mels, mel_lens) in enumerate(batches):
        step(tokens, token_lens, mels, mel_lens)
        now = time.perf_counter()
        if i >= args.warmup:
            total += now - start
            count += tokens.size(0)
        start = time.perf_counter()
    return count / total


# 2c. The same batches from memory in a pass of their own while the feed is still open (its
#     threads and the data rank alive, every batch received), then 2b after feed.close(): whether
#     a step is slower with the feed open or only earlier in the script.
replayed_feed_open = timed_pass((t, tl, m, ml) for t, tl, m, ml, _ in kept)
data_rank.mark("replay_feed_open")
feed.close()
data_rank.mark("close")

# 2b. The same batches from memory, in a pass of their own after the feed ended.
replayed = timed_pass((t, tl, m, ml) for t, tl, m, ml, _ in kept)
data_rank.mark("replay_own_pass")  # the data rank waits for this rank's MPI_Finalize


# 3. A DataLoader reading the same samples with h5py, batched as sluice batched them, padded to
#    the same shapes and normalised with the cache's statistics.
class CacheDataset(torch.utils.data.Dataset):
    def __init__(self, cache, shapes):
        with h5py.File(os.path.join(cache, "index.h5"), "r") as index:
            self.shard, self.row = index["shard"][:], index["row"][:]
        self.cache, self.shapes, self.files = cache, shapes, {}
        sums = [0, 0, 0]
        for name in sorted(os.listdir(cache)):
            if name.startswith("shard-") and name.endswith(".h5"):
                with h5py.File(os.path.join(cache, name), "r") as f:
                    sums[0] = sums[0] + f["mel_sum"][:]
                    sums[1] = sums[1] + f["mel_sum_sq"][:]
                    sums[2] += f["mel"].shape[0]
        self.mean = sums[0] / sums[2]
        self.std = np.sqrt(np.maximum(sums[1] / sums[2] - self.mean ** 2, 1e-10))

    def file(self, shard):
        if shard not in self.files:  # one handle per worker process
            self.files[shard] = h5py.File(os.path.join(self.cache, f"shard-{shard:05d}.h5"), "r")
        return self.files[shard]

    def __len__(self):
        return len(self.shapes)

    def __getitem__(self, b):
        indices, max_tokens, max_frames = self.shapes[b]
        tokens = np.zeros((len(indices), max_tokens), np.int32)
        mels = np.zeros((len(indices), max_frames, len(self.mean)), np.float32)
        token_lens, mel_lens = np.zeros(len(indices), np.int32), np.zeros(len(indices), np.int32)
        for i, index in enumerate(indices):
            f, row = self.file(int(self.shard[index])), int(self.row[index])
            t0, t1 = f["token_offsets"][row:row + 2]
            m0, m1 = f["mel_offsets"][row:row + 2]
            tokens[i, :t1 - t0] = f["tokens"][t0:t1]
            mels[i, :m1 - m0] = (f["mel"][m0:m1] - self.mean) / self.std
            token_lens[i], mel_lens[i] = t1 - t0, m1 - m0
        return torch.from_numpy(tokens), torch.from_numpy(token_lens), torch.from_numpy(mels), torch.from_numpy(mel_lens)


def interleaved_pass(loader):
    """The loader's batches (in plan order, so the i-th is kept[i]'s samples), each step followed by
    the same step on kept[i] from memory, as the feed's steps were: the loader and the replay see the
    same load, and loader / replay is the DataLoader's η, comparable with sluice's interleaved η."""
    fed_time, replay_time, count = 0.0, 0.0, 0
    start = time.perf_counter()
    for i, (batch, memory) in enumerate(zip(loader, kept)):
        step(*batch)
        now = time.perf_counter()
        step(*memory[:4])
        if i >= args.warmup:
            fed_time += now - start
            replay_time += time.perf_counter() - now
            count += batch[0].size(0)
        start = time.perf_counter()
    return {"samples_per_s": count / fed_time, "replayed_samples_per_s": count / replay_time,
            "eta": replay_time / fed_time}


shapes = [(ix, t.size(1), m.size(1)) for t, _, m, _, ix in kept]
dataset = CacheDataset(args.cache, shapes)
loaders = {}
for workers in [int(w) for w in args.workers.split(",")]:
    # prefetch_factor only with workers: torch 2.x refuses it without, 1.13 refuses anything but 2.
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, shuffle=False, num_workers=workers,
                                         persistent_workers=False, pin_memory=device.type == "cuda",
                                         **({"prefetch_factor": 4} if workers else {}))
    loaders[workers] = interleaved_pass(loader)
data_rank.mark("dataloader_passes")
best = max(loaders, key=lambda w: loaders[w]["eta"])
phases = data_rank.phases()
if "feed" in phases:
    phases["feed"]["batches"] = timed_batches
    phases["feed"]["cpu_s_per_batch"] = phases["feed"]["cpu_s"] / timed_batches
print(json.dumps({"device": str(device), "steps": len(kept), "batch_size": kept[0][0].size(0), "fed_samples_per_s": fed,
                  "replayed_samples_per_s": replayed, "eta": fed / replayed,
                  "replayed_interleaved_samples_per_s": replayed_interleaved,
                  "replayed_feed_open_samples_per_s": replayed_feed_open,
                  "eta_interleaved": fed / replayed_interleaved,
                  "dataloader": loaders, "dataloader_best_workers": best,
                  "dataloader_eta_interleaved": loaders[best]["eta"],
                  "sluice_over_dataloader_eta": (fed / replayed_interleaved) / loaders[best]["eta"],
                  "sluice_over_best_dataloader_samples_per_s": fed / max(l["samples_per_s"] for l in loaders.values()),
                  "data_rank_pid": data_rank.pid, "data_rank_cpu": phases}, indent=1),
      flush=True)
