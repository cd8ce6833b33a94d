"""A small PyTorch TTS model trained on batches fed by sluice's data ranks (docs/python.md).

    PYTHONPATH=build/python mpirun -np 1 sluice train -c examples/python_tts/config.yaml : -np 2 python3 examples/python_tts/train.py

The model is a toy on purpose: token embeddings, a convolutional encoder, a uniform alignment of
frames to tokens (frame f of a sample reads token f * token_len / mel_len) and a small decoder
to mels; masked L1 loss. DDP among the Python ranks: gloo on the CPU, nccl on GPUs.

Validation: after the steps train.validation_every names and at the end, the mean masked L1 over
the validation split (each rank its share, summed over the ranks). Preemption: on SIGTERM/SIGUSR1
the feed ends at a step every rank agrees on; rank 0 then writes --checkpoint (model, optimiser,
the step to resume from), and a later run with the same --checkpoint continues from there.

--out FILE writes this rank's record (losses, validation losses, the batches it saw) as JSON.
"""
import argparse
import json
import os

import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import sluice


class TinyTTS(nn.Module):
    def __init__(self, vocab_size, n_mels, dim=64):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, dim, padding_idx=0)
        self.encoder = nn.Sequential(nn.Conv1d(dim, dim, 5, padding=2), nn.ReLU(),
                                     nn.Conv1d(dim, dim, 5, padding=2), nn.ReLU())
        self.decoder = nn.Sequential(nn.Linear(dim + 1, dim), nn.ReLU(), nn.Linear(dim, n_mels))

    def forward(self, tokens, token_lens, mel_lens, frames):
        hidden = self.encoder(self.embed(tokens.long()).transpose(1, 2)).transpose(1, 2)  # B, T, D
        frame = torch.arange(frames, device=tokens.device, dtype=torch.float32)[None, :]
        mel_lens = mel_lens.clamp(min=1).float()[:, None]
        position = (frame * token_lens.float()[:, None] / mel_lens).long()
        position = torch.minimum(position, (token_lens.long()[:, None] - 1).clamp(min=0))
        aligned = torch.gather(hidden, 1, position[..., None].expand(-1, -1, hidden.size(2)))
        return self.decoder(torch.cat([aligned, (frame / mel_lens)[..., None]], dim=-1))  # B, F, n_mels


def masked_l1(predicted, mels, mel_lens):
    mask = (torch.arange(mels.size(1), device=mels.device)[None, :] < mel_lens[:, None]).float()[..., None]
    return ((predicted - mels).abs() * mask).sum() / (mask.sum() * mels.size(2)).clamp(min=1)


def validation_loss(feed, model):
    """The mean masked L1 over the validation split: this rank's share, summed over the ranks."""
    totals = torch.zeros(2)  # loss x samples, samples
    with torch.no_grad():
        for batch in feed.validation():  # host tensors, normalised like training batches
            mels = batch.mels.to(feed.device)
            predicted = model(batch.tokens.to(feed.device), batch.token_lens.to(feed.device),
                              batch.mel_lens.to(feed.device), mels.size(1))
            loss = masked_l1(predicted, mels, batch.mel_lens.to(feed.device))
            feed.loss(loss)  # averaged over the ranks into ranks/rank-N.json; non-finite stops the run
            totals += torch.tensor([loss.item() * batch.size, float(batch.size)])
    torch.distributed.all_reduce(totals)
    return (totals[0] / totals[1].clamp(min=1)).item()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="write this rank's losses and batches as JSON ({rank}: the model rank)")
    parser.add_argument("--checkpoint", help="written by rank 0 when the run stops or ends; read at start when present")
    parser.add_argument("--lr", type=float, default=3e-3)
    args = parser.parse_args()

    torch.manual_seed(0)  # the same initial weights on every rank (DDP also broadcasts them)
    torch.set_num_threads(1)
    state = torch.load(args.checkpoint) if args.checkpoint and os.path.exists(args.checkpoint) else None
    feed = sluice.Feed(resume_step=state["resume_step"] if state else None)
    feed.init_process_group()  # gloo on the CPU, nccl on a GPU
    net = TinyTTS(feed.vocab_size, feed.n_mels).to(feed.device)
    # watch_ddp: the timeline tells DDP's gradient all-reduce wait apart from backward.
    model = feed.watch_ddp(DDP(net, device_ids=[feed.gpu] if feed.gpu >= 0 else None))
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    if state:
        net.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])

    losses, batches, validations = [], [], []
    for batch in feed:
        with feed.span("forward"):
            predicted = model(batch.tokens, batch.token_lens, batch.mel_lens, batch.mels.size(1))
            loss = masked_l1(predicted, batch.mels, batch.mel_lens)
        with feed.span("backward"):
            loss.backward()
        with feed.span("optimizer"):
            optimizer.step()
            optimizer.zero_grad()
        losses.append(loss.item())
        feed.loss(losses[-1])  # a non-finite loss on any rank stops every rank at this step
        batches.append({"global_step": batch.global_step, "epoch": batch.epoch, "step": batch.step,
                        "indices": batch.indices.tolist()})
        if feed.validation_due(batch):
            validations.append({"global_step": batch.global_step + 1, "loss": validation_loss(feed, net)})
    if feed.stopped_at is None:  # a finished run validates once more; a stopped one checkpoints at once
        validations.append({"global_step": feed.end_step, "loss": validation_loss(feed, net)})
    if args.checkpoint and feed.rank == 0:
        resume_step = feed.stopped_at if feed.stopped_at is not None else feed.end_step
        with feed.span("checkpoint"):
            torch.save({"model": net.state_dict(), "optimizer": optimizer.state_dict(), "resume_step": resume_step},
                       args.checkpoint)
    code = feed.close()
    if args.out:
        with open(args.out.format(rank=feed.rank), "w") as out:
            json.dump({"rank": feed.rank, "mpi_rank": feed.mpi_rank, "world_size": feed.world_size,
                       "first_step": feed.first_step, "end_step": feed.end_step,
                       "steps_per_epoch": feed.steps_per_epoch, "losses": losses, "batches": batches,
                       "validations": validations, "stopped_at": feed.stopped_at}, out)
    if feed.rank == 0 and losses:
        validated = ", ".join(f"{v['loss']:.4f}" for v in validations) or "none"
        stopped = f"; stopped at step {feed.stopped_at}" if feed.stopped_at is not None else ""
        print(f"python rank 0: loss {losses[0]:.4f} -> {losses[-1]:.4f} over {len(losses)} steps; validation "
              f"{validated}{stopped}", flush=True)
    torch.distributed.destroy_process_group()
    return code


if __name__ == "__main__":
    raise SystemExit(main())
