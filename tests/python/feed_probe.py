"""A Python model rank for the tests (test_python_ranks.py): takes batches as a training script
would, but only records what it saw, and reports a sluice error as `ERROR <class>: <message>`.

    feed_probe.py OUT [--config FILE] [--set KEY=VALUE ...] [--resume-step N] [--stop-data-after K PATTERN]
                  [--validate] [--pace SECONDS] [--ready-after K FILE] [--sleep-rank R SECONDS] [--pid-file F]

--stop-data-after K PATTERN: after K batches, model rank 0 stops (SIGSTOP) the process whose
command line contains PATTERN (the data rank): a silent peer, to be named by the next batch wait.
--validate: a validation pass wherever feed.validation_due() says, and one at the end; the record
lists each pass's step and sample indices.
--pace SECONDS: each step takes at least this long (a run that lasts until a signal stops it).
--ready-after K FILE: after K batches, model rank 0 creates FILE (the test then signals mpirun).
--sleep-rank R SECONDS: model rank R sleeps SECONDS in each step (a straggler).
--pid-file F: each rank writes its process id to F ({rank}: its model rank) once its feed is open.
--by-epoch: iterates `for epoch in feed.epochs(): for batch in epoch` and records each epoch's
number and global steps (record["epochs"]).
--keep K: keeps batch.mels of the first K batches, with a clone made at the time, and records
whether each still equals its clone at the end (record["kept_equal"]) and after feed.close()
(record["kept_equal_after_close"]: the feed's memory stays while they are referenced).
--nan-loss-at STEP RANK: model rank RANK reports a NaN loss at global STEP (feed.loss); every
other step and rank reports 1.0. The loss a diverged model would give.
"""
import argparse
import json
import os
import signal
import subprocess
import time

import sluice

parser = argparse.ArgumentParser()
parser.add_argument("out")
parser.add_argument("--config")
parser.add_argument("--set", action="append", default=[])
parser.add_argument("--resume-step", type=int)
parser.add_argument("--stop-data-after", nargs=2)
parser.add_argument("--validate", action="store_true")
parser.add_argument("--pace", type=float, default=0)
parser.add_argument("--ready-after", nargs=2)
parser.add_argument("--sleep-rank", nargs=2)
parser.add_argument("--pid-file")
parser.add_argument("--nan-loss-at", nargs=2, type=int)
parser.add_argument("--by-epoch", action="store_true")
parser.add_argument("--keep", type=int, default=0)
args = parser.parse_args()

record = {"batches": [], "validations": [], "epochs": []}


def batches(feed):
    """The feed's batches, by epoch when asked (--by-epoch)."""
    if not args.by_epoch:
        yield from feed
        return
    for epoch in feed.epochs():
        steps = []
        record["epochs"].append({"number": epoch.number, "steps": steps})
        for batch in epoch:
            steps.append(batch.global_step)
            yield batch


def validation_pass(feed, step):
    indices = []
    for batch in feed.validation():
        assert batch.epoch == -1 and batch.mels.device.type == "cpu"
        assert batch.mels.shape[0] == batch.size == len(batch.indices)
        indices.extend(batch.indices.tolist())
    record["validations"].append({"step": step, "indices": indices})

try:
    feed = sluice.Feed(config=args.config, overrides=args.set, resume_step=args.resume_step)
    record.update(rank=feed.rank, world_size=feed.world_size, mpi_rank=feed.mpi_rank,
                  first_step=feed.first_step, end_step=feed.end_step, steps_per_epoch=feed.steps_per_epoch,
                  validation_every=feed.validation_every, validation_samples=feed.validation_samples)
    if args.pid_file:
        with open(args.pid_file.format(rank=feed.rank) + ".tmp", "w") as pid_file:
            pid_file.write(str(os.getpid()))
        os.rename(args.pid_file.format(rank=feed.rank) + ".tmp", args.pid_file.format(rank=feed.rank))
    kept = []
    for batch in batches(feed):
        started = time.monotonic()
        if len(kept) < args.keep:
            kept.append((batch.mels, batch.mels.clone()))
        # Zero copy: the tensors are views of the receive slot, and agree with the DLPack shapes.
        assert tuple(batch.mels.shape) == tuple(batch.dlpack("mels").shape)
        record["batches"].append({"global_step": batch.global_step, "epoch": batch.epoch, "step": batch.step,
                                  "indices": batch.indices.tolist(), "frames": batch.mel_lens.sum().item()})
        if args.nan_loss_at:
            diverged = [batch.global_step, feed.rank] == args.nan_loss_at
            feed.loss(float("nan") if diverged else 1.0)
        if args.stop_data_after and feed.rank == 0 and len(record["batches"]) == int(args.stop_data_after[0]):
            pids = subprocess.run(["pgrep", "-f", args.stop_data_after[1]], capture_output=True, text=True).stdout.split()
            for pid in pids:
                argv = open(f"/proc/{pid}/cmdline").read().split("\0")
                if os.path.basename(argv[0]) == "sluice" and argv[1:2] == ["train"]:  # not mpirun
                    os.kill(int(pid), signal.SIGSTOP)
                    record["stopped"] = int(pid)
        if args.validate and feed.validation_due(batch):
            validation_pass(feed, batch.global_step + 1)
            assert batch.indices.numel() == batch.size  # the training batch outlives the pass
        if args.sleep_rank and feed.rank == int(args.sleep_rank[0]):
            time.sleep(float(args.sleep_rank[1]))
        if args.ready_after and feed.rank == 0 and len(record["batches"]) == int(args.ready_after[0]):
            open(args.ready_after[1], "w").close()
        time.sleep(max(0.0, args.pace - (time.monotonic() - started)))
    record["kept_equal"] = [bool((view == copy).all()) for view, copy in kept]
    record["stopped_at"], record["stop_signal"] = feed.stopped_at, feed.stop_signal
    if args.validate and feed.stopped_at is None:
        validation_pass(feed, feed.end_step)
    record["exit"] = feed.close()
    if kept:
        record["kept_equal_after_close"] = [bool((view == copy).all()) for view, copy in kept]
except sluice.Error as error:
    record["error"] = {"class": type(error).__name__, "message": str(error)}
    print(f"ERROR {type(error).__name__}: {error}", flush=True)
finally:
    path = args.out.format(rank=record.get("rank", os.environ.get("OMPI_COMM_WORLD_RANK", "0")))
    with open(path, "w") as out:
        json.dump(record, out)
