#!/usr/bin/python3
"""The torchaudio log-mel pipeline sluice's prep job is measured against.

Usage: torchaudio_baseline.py [--threads 1] [--repeat 1] [--sample-rate 22050] ... FILES_OR_DIRS

Per file: torchaudio.load, resample only when the file's rate differs, average channels,
MelSpectrogram, log(clamp(x, log_floor)): what a PyTorch TTS recipe does in its data loader.
The feature settings default to sluice's (dataset/mel.h). Prints one JSON line:
{"files": .., "audio_seconds": .., "wall_seconds": .., "audio_s_per_s": ..}
audio_seconds counts each file's duration once per repeat; one untimed warm-up file comes first,
so lazy initialisation inside torch is not charged to the measurement.
"""
import argparse
import json
import os
import sys
import time

import torch
import torchaudio

AUDIO_SUFFIXES = (".wav", ".flac", ".ogg")


def audio_files(paths):
    files = []
    for path in paths:
        if os.path.isdir(path):
            names = [name for name in os.listdir(path) if name.lower().endswith(AUDIO_SUFFIXES)]
            files += sorted(os.path.join(path, name) for name in names)
        else:
            files.append(path)
    return files


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--repeat", type=int, default=1, help="passes over the files")
    parser.add_argument("--sample-rate", type=int, default=22050)
    parser.add_argument("--n-fft", type=int, default=1024)
    parser.add_argument("--win-length", type=int, default=1024)
    parser.add_argument("--hop-length", type=int, default=256)
    parser.add_argument("--n-mels", type=int, default=80)
    parser.add_argument("--f-min", type=float, default=0.0)
    parser.add_argument("--f-max", type=float, default=8000.0)
    parser.add_argument("--power", type=float, default=1.0)
    parser.add_argument("--log-floor", type=float, default=1e-5)
    parser.add_argument("paths", nargs="+", help="audio files or directories of them")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    files = audio_files(args.paths)
    if not files:
        sys.exit("torchaudio_baseline.py: no audio files in " + " ".join(args.paths))
    mel = torchaudio.transforms.MelSpectrogram(
        sample_rate=args.sample_rate,
        n_fft=args.n_fft,
        win_length=args.win_length,
        hop_length=args.hop_length,
        f_min=args.f_min,
        f_max=args.f_max,
        n_mels=args.n_mels,
        power=args.power,
        norm="slaney",
        mel_scale="slaney",
    )
    resamplers = {}  # one per source rate: Resample precomputes its kernel

    def features(path):
        waveform, rate = torchaudio.load(path)
        if rate != args.sample_rate:
            if rate not in resamplers:
                resamplers[rate] = torchaudio.transforms.Resample(rate, args.sample_rate)
            waveform = resamplers[rate](waveform)
        waveform = waveform.mean(dim=0)
        log_mel = torch.log(torch.clamp(mel(waveform), min=args.log_floor))
        return waveform.shape[-1] / args.sample_rate, log_mel

    with torch.inference_mode():
        features(files[0])
        audio_seconds = 0.0
        start = time.perf_counter()
        for _ in range(args.repeat):
            for path in files:
                seconds, _ = features(path)
                audio_seconds += seconds
        wall_seconds = time.perf_counter() - start

    print(
        json.dumps(
            {
                "files": len(files) * args.repeat,
                "audio_seconds": audio_seconds,
                "wall_seconds": wall_seconds,
                "audio_s_per_s": audio_seconds / wall_seconds,
            }
        )
    )


if __name__ == "__main__":
    main()
