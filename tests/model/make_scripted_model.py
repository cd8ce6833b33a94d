"""Writes a small TorchScript acoustic model for the sluice model tests.

usage: make_scripted_model.py OUT.pt VOCAB N_MELS [--wrong-arity]

The module follows sluice's bring-your-own-model contract (model/model_config.h):
forward(tokens int64 [B,T], token_lens int64 [B], mels float [B,F,n_mels], mel_lens int64 [B])
returns the scalar loss; padding past the lengths is masked here. --wrong-arity writes a module
whose forward takes two inputs, which sluice must reject.
"""
import sys

import torch
from torch import nn


class FramePredictor(nn.Module):
    """Predicts each frame from the previous one plus the mean token embedding (teacher forcing)."""

    def __init__(self, vocab: int, n_mels: int, width: int = 32):
        super().__init__()
        self.embedding = nn.Embedding(vocab, width)
        self.prenet = nn.Linear(n_mels, width)
        self.out = nn.Linear(2 * width, n_mels)
        self.dropout = nn.Dropout(0.1)

    def forward(self, tokens: torch.Tensor, token_lens: torch.Tensor, mels: torch.Tensor,
                mel_lens: torch.Tensor) -> torch.Tensor:
        frames = mels.size(1)
        token_valid = torch.arange(tokens.size(1), device=tokens.device)[None, :] < token_lens[:, None]
        embedded = self.embedding(tokens.masked_fill(~token_valid, 0)) * token_valid[:, :, None]
        context = embedded.sum(1) / token_lens[:, None].to(embedded.dtype)
        frame_valid = torch.arange(frames, device=mels.device)[None, :] < mel_lens[:, None]
        target = mels.masked_fill(~frame_valid[:, :, None], 0.0)
        previous = torch.cat([torch.zeros_like(target[:, :1]), target[:, :-1]], 1)
        hidden = torch.relu(self.prenet(previous))
        hidden = self.dropout(torch.cat([hidden, context[:, None, :].expand(-1, frames, -1)], -1))
        error = (self.out(hidden) - target).abs() * frame_valid[:, :, None]
        return error.sum() / (frame_valid.sum() * mels.size(2))


class WrongArity(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(1))

    def forward(self, tokens: torch.Tensor, mels: torch.Tensor) -> torch.Tensor:
        return (mels * self.weight).sum()


def main() -> int:
    out, vocab, n_mels = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    torch.manual_seed(0)
    module = WrongArity() if "--wrong-arity" in sys.argv[4:] else FramePredictor(vocab, n_mels)
    torch.jit.script(module).save(out)
    print(f"wrote {out} with torch {torch.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
