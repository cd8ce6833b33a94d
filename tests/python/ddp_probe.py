"""A Python model rank for the DDP tests (test_python_ranks.py): the example's tiny TTS model under
DistributedDataParallel (gloo), its step marked as the example marks it (forward, backward,
optimizer), one rank made slow.

    ddp_probe.py OUT [--sleep-rank R SECONDS] [--sleep-in gap|forward] [--pid-file F] [--pace SECONDS]

--sleep-rank R SECONDS: model rank R sleeps SECONDS in each step; --sleep-in says where: `gap`
(default) at the start of the step, outside every span it marks (work the script does not mark,
such as a slow augmentation), `forward` inside its forward span.
--pid-file F: each rank writes its process id to F ({rank}: its model rank) once DDP is set up.
--pace SECONDS: each step takes at least this long (on every rank).
OUT ({rank}: the model rank) gets the rank's record: model rank, MPI rank, steps, losses.
"""
import argparse
import importlib.util
import json
import os
import time

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

import sluice

parser = argparse.ArgumentParser()
parser.add_argument("out")
parser.add_argument("--sleep-rank", nargs=2)
parser.add_argument("--sleep-in", choices=["gap", "forward"], default="gap")
parser.add_argument("--pid-file")
parser.add_argument("--pace", type=float, default=0)
args = parser.parse_args()

spec = importlib.util.spec_from_file_location("python_tts", os.environ["EXAMPLE"])
example = importlib.util.module_from_spec(spec)
spec.loader.exec_module(example)

torch.manual_seed(0)
torch.set_num_threads(1)
feed = sluice.Feed()
feed.init_process_group("gloo")
model = feed.watch_ddp(DDP(example.TinyTTS(feed.vocab_size, feed.n_mels)))
optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
if args.pid_file:
    with open(args.pid_file.format(rank=feed.rank) + ".tmp", "w") as pid_file:
        pid_file.write(str(os.getpid()))
    os.rename(args.pid_file.format(rank=feed.rank) + ".tmp", args.pid_file.format(rank=feed.rank))
slow = args.sleep_rank is not None and feed.rank == int(args.sleep_rank[0])
pause = float(args.sleep_rank[1]) if slow else 0.0

losses = []
for batch in feed:
    started = time.monotonic()
    if args.sleep_in == "gap":
        time.sleep(pause)
    with feed.span("forward"):
        if args.sleep_in == "forward":
            time.sleep(pause)
        loss = example.masked_l1(model(batch.tokens, batch.token_lens, batch.mel_lens, batch.mels.size(1)),
                                 batch.mels, batch.mel_lens)
    with feed.span("backward"):
        loss.backward()  # DDP's gradient all-reduce: the fast rank waits here for the slow one
    with feed.span("optimizer"):
        optimizer.step()
        optimizer.zero_grad()
    losses.append(loss.item())
    time.sleep(max(0.0, args.pace - (time.monotonic() - started)))
code = feed.close()
with open(args.out.format(rank=feed.rank), "w") as out:
    json.dump({"rank": feed.rank, "mpi_rank": feed.mpi_rank, "steps": len(losses), "losses": losses,
               "exit": code, "stopped_at": feed.stopped_at}, out)
torch.distributed.destroy_process_group()
raise SystemExit(code)
