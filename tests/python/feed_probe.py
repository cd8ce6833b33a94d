"""A Python model rank for the tests (test_python_ranks.py): takes batches as a training script
would, but only records what it saw, and reports a sluice error as `ERROR <class>: <message>`.

    feed_probe.py OUT [--config FILE] [--set KEY=VALUE ...] [--resume-step N] [--stop-data-after K PATTERN]

--stop-data-after K PATTERN: after K batches, model rank 0 stops (SIGSTOP) the process whose
command line contains PATTERN (the data rank): a silent peer, to be named by the next batch wait.
"""
import argparse
import json
import os
import signal
import subprocess

import sluice

parser = argparse.ArgumentParser()
parser.add_argument("out")
parser.add_argument("--config")
parser.add_argument("--set", action="append", default=[])
parser.add_argument("--resume-step", type=int)
parser.add_argument("--stop-data-after", nargs=2)
args = parser.parse_args()

record = {"batches": []}
try:
    feed = sluice.Feed(config=args.config, overrides=args.set, resume_step=args.resume_step)
    record.update(rank=feed.rank, world_size=feed.world_size, mpi_rank=feed.mpi_rank,
                  first_step=feed.first_step, end_step=feed.end_step, steps_per_epoch=feed.steps_per_epoch)
    for batch in feed:
        # Zero copy: the tensors are views of the receive slot, and agree with the DLPack shapes.
        assert tuple(batch.mels.shape) == tuple(batch.dlpack("mels").shape)
        record["batches"].append({"global_step": batch.global_step, "epoch": batch.epoch, "step": batch.step,
                                  "indices": batch.indices.tolist(), "frames": batch.mel_lens.sum().item()})
        if args.stop_data_after and feed.rank == 0 and len(record["batches"]) == int(args.stop_data_after[0]):
            pids = subprocess.run(["pgrep", "-f", args.stop_data_after[1]], capture_output=True, text=True).stdout.split()
            for pid in pids:
                argv = open(f"/proc/{pid}/cmdline").read().split("\0")
                if os.path.basename(argv[0]) == "sluice" and argv[1:2] == ["train"]:  # not mpirun
                    os.kill(int(pid), signal.SIGSTOP)
                    record["stopped"] = int(pid)
    record["exit"] = feed.close()
except sluice.Error as error:
    record["error"] = {"class": type(error).__name__, "message": str(error)}
    print(f"ERROR {type(error).__name__}: {error}", flush=True)
finally:
    path = args.out.format(rank=record.get("rank", os.environ.get("OMPI_COMM_WORLD_RANK", "0")))
    with open(path, "w") as out:
        json.dump(record, out)
