#!/usr/bin/python3
"""Reference mel features from torchaudio, for tests/dataset/test_mel.cpp.

Usage: mel_oracle.py JOBS.json

JOBS.json is a list of jobs; all run in one process because importing torch costs seconds.
Every job writes raw little-endian float32 files named from its "output" path:
  output + SUFFIX       torchaudio as a recipe runs it: float32 throughout
  output + "64" SUFFIX  torchaudio's definition without its float32 rounding: the same code
                        with float64 as torch's default dtype, so the filterbank (built with
                        torch.linspace) is float64 too, not just the transform.
Jobs:
  {"kind": "log_mel", "config": {MelConfig fields}, "input": path, "output": path}
      input: raw float32 mono samples.
      SUFFIX "":      log-mel, time-major [frame][mel] (the layout of sluice's MelExtractor)
      SUFFIX ".peak": per frame, the largest |STFT bin| over the whole spectrum, f_max or not
  {"kind": "filterbank", "config": {...}, "output": path}
      SUFFIX "": torchaudio.functional.melscale_fbanks, [n_fft/2 + 1][n_mels]
"""
import contextlib
import json
import sys

import numpy as np
import torch
import torchaudio


def norm(config):
    # sluice spells "no normalisation" as "none"; torchaudio takes None.
    return None if config["norm"] == "none" else config["norm"]


@contextlib.contextmanager
def default_dtype(dtype):
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def stft_options(config):
    return dict(
        n_fft=config["n_fft"],
        win_length=config["win_length"],
        hop_length=config["hop_length"],
        window_fn=torch.hann_window,
        normalized=False,
        center=config["center"],
        pad_mode=config["pad_mode"],
        onesided=True,
    )


def log_mel(samples, config):
    transform = torchaudio.transforms.MelSpectrogram(
        sample_rate=config["sample_rate"],
        f_min=config["f_min"],
        f_max=config["f_max"],
        n_mels=config["n_mels"],
        power=config["power"],
        norm=norm(config),
        mel_scale=config["mel_scale"],
        **stft_options(config),
    )
    waveform = torch.from_numpy(samples).to(torch.get_default_dtype())
    mel = transform(waveform)  # [n_mels, frames]
    magnitude = torchaudio.transforms.Spectrogram(power=1.0, **stft_options(config))(waveform)
    return {
        "": torch.log(torch.clamp(mel, min=config["log_floor"])).T.contiguous().numpy(),
        ".peak": magnitude.max(dim=0).values.numpy(),
    }


def filterbank(config):
    bank = torchaudio.functional.melscale_fbanks(
        n_freqs=config["n_fft"] // 2 + 1,
        f_min=config["f_min"],
        f_max=config["f_max"],
        n_mels=config["n_mels"],
        sample_rate=config["sample_rate"],
        norm=norm(config),
        mel_scale=config["mel_scale"],
    )
    return {"": bank.numpy()}


def run(job):
    if job["kind"] == "filterbank":
        return filterbank(job["config"])
    return log_mel(np.fromfile(job["input"], dtype="<f4"), job["config"])


def main():
    torch.set_num_threads(1)
    with open(sys.argv[1]) as f:
        jobs = json.load(f)
    for job in jobs:
        for suffix, array in run(job).items():
            array.astype("<f4").tofile(job["output"] + suffix)
        with default_dtype(torch.float64):
            for suffix, array in run(job).items():
                array.astype("<f4").tofile(job["output"] + "64" + suffix)


if __name__ == "__main__":
    main()
