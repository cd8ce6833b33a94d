"""Reads a sluice shard with h5py only (no sluice code) and prints it as JSON on stdout.

Used by h5py_interop_test.cpp: the test compares every value with what ShardReader returns, which
shows that the format is what docs/cache-format.md says and that other tools can read it.
"""
import json
import sys

import h5py
import numpy as np


def main(path):
    out = {}
    with h5py.File(path, "r") as f:
        out["attrs"] = {k: (v if isinstance(v, str) else int(v)) for k, v in f.attrs.items()}
        out["datasets"] = {}
        for name, ds in f.items():
            out["datasets"][name] = {
                "shape": list(ds.shape),
                "dtype": ds.dtype.str if ds.dtype.kind != "O" else "vlen-str",
                "chunks": list(ds.chunks) if ds.chunks else None,
                "fletcher32": bool(ds.fletcher32),
                "compression": ds.compression,
            }
        mel = f["mel"][()]
        mel_offsets = f["mel_offsets"][()]
        tokens = f["tokens"][()]
        token_offsets = f["token_offsets"][()]
        ids = f["id"].asstr()[()].tolist()
        texts = f["text"].asstr()[()].tolist()
        samples = []
        for i, sample_id in enumerate(ids):
            frames = mel[mel_offsets[i]:mel_offsets[i + 1]]
            samples.append({
                "id": sample_id,
                "text": texts[i],
                "language": f["language"].asstr()[i],
                "speaker": f["speaker"].asstr()[i],
                "seconds": float(f["seconds"][i]),
                "n_frames": int(frames.shape[0]),
                # float32 -> float64 is exact, and json prints float64 exactly (repr).
                "mel": [float(v) for v in frames.astype(np.float64).ravel()],
                "tokens": [int(t) for t in tokens[token_offsets[i]:token_offsets[i + 1]]],
            })
        out["samples"] = samples
        if "mel_chunk_addresses" in f:
            # Where HDF5 itself says each /mel chunk is stored, to compare with the shard's table.
            rows = f["mel"].chunks[0]
            n_chunks = (f["mel"].shape[0] + rows - 1) // rows
            out["mel_chunk_addresses"] = [int(a) for a in f["mel_chunk_addresses"][()]]
            out["mel_chunk_offsets_h5py"] = [
                int(f["mel"].id.get_chunk_info_by_coord((c * rows, 0)).byte_offset)
                for c in range(n_chunks)
            ]
        out["rejects"] = f["rejects"].asstr()[()].tolist()
        if "mel_sum" in f:
            # The per-bin sums as stored, and as numpy computes them from /mel (pairwise summation:
            # equal up to rounding, not bit for bit).
            out["mel_sum"] = [float(v) for v in f["mel_sum"][()]]
            out["mel_sum_sq"] = [float(v) for v in f["mel_sum_sq"][()]]
            mel64 = mel.astype(np.float64)
            out["mel_sum_numpy"] = [float(v) for v in mel64.sum(axis=0)]
            out["mel_sum_sq_numpy"] = [float(v) for v in (mel64 * mel64).sum(axis=0)]
    json.dump(out, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main(sys.argv[1])
