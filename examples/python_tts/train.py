"""A small PyTorch TTS model trained on batches fed by sluice's data ranks (docs/python.md).

    mpirun -np 1 sluice train -c examples/python_tts/config.yaml : -np 2 sluice-python examples/python_tts/train.py

The model is a toy on purpose: token embeddings, a convolutional encoder, a uniform alignment of
frames to tokens (frame f of a sample reads token f * token_len / mel_len) and a small decoder
to mels; masked L1 loss. DDP among the Python ranks: gloo on the CPU, nccl on GPUs.

--out FILE writes this rank's record (losses, the batches it saw) as JSON for the tests.
"""
import argparse
import json

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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="write this rank's losses and batches as JSON ({rank}: the model rank)")
    parser.add_argument("--resume-step", type=int, default=None, help="continue from this global step")
    parser.add_argument("--lr", type=float, default=3e-3)
    args = parser.parse_args()

    torch.manual_seed(0)  # the same initial weights on every rank (DDP also broadcasts them)
    torch.set_num_threads(1)
    feed = sluice.Feed(resume_step=args.resume_step)
    feed.init_process_group()  # gloo on the CPU, nccl on a GPU
    model = TinyTTS(feed.vocab_size, feed.n_mels).to(feed.device)
    model = DDP(model, device_ids=[feed.gpu] if feed.gpu >= 0 else None)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    losses, batches = [], []
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
        batches.append({"global_step": batch.global_step, "epoch": batch.epoch, "step": batch.step,
                        "indices": batch.indices.tolist()})
    code = feed.close()
    if args.out:
        with open(args.out.format(rank=feed.rank), "w") as out:
            json.dump({"rank": feed.rank, "mpi_rank": feed.mpi_rank, "world_size": feed.world_size,
                       "first_step": feed.first_step, "end_step": feed.end_step,
                       "steps_per_epoch": feed.steps_per_epoch, "losses": losses, "batches": batches}, out)
    if feed.rank == 0:
        print(f"python rank 0: loss {losses[0]:.4f} -> {losses[-1]:.4f} over {len(losses)} steps", flush=True)
    torch.distributed.destroy_process_group()
    return code


if __name__ == "__main__":
    raise SystemExit(main())
