#!/usr/bin/python3
"""Whether memory stayed flat in a soak run (bench/soak/soak.sh writes WORK/rss.tsv and calls this).

    bench/soak/soak_summary.py WORK [WARMUP_MIN] [WINDOW_MIN]

The measure. A model rank's RSS swings by 50-90 MiB inside every step (the activations and
gradients of the bucket in hand: a 544-frame batch needs more than a 352-frame one), so one
minute's peak depends on which buckets that minute happened to train, and the spread of per-minute
peaks measures that swing, not growth (9-12% in the first hour-long soak, with no growth at all).
Growth shows in two numbers that do not depend on the bucket mix once a window holds many steps of
every bucket:

  high-water mark  the highest RSS any step reached in the window (the VmHWM each sample reads and
                   resets, so no step's peak falls between samples)
  floor            the lowest RSS sampled in the window: what stays resident between steps

Both are taken over consecutive WINDOW_MIN-minute windows (default 10) after WARMUP_MIN minutes
(default 5); growth is the last window against the first, and the drift is the largest distance of
any window from the first. Two verdicts, every rank: retained memory is flat when the floor's
growth is within 5% (a leak raises the floor: what a step leaves behind stays), and the peak is
flat when the high-water mark's growth is within 5%. The peak also moves with the C allocator: with
glibc's dynamic mmap threshold, freed tensor blocks stay in the heap for reuse, and a step's peak
then depends on how that heap is fragmented, in discrete levels tens of MiB apart (measured in
docs/performance.md, "Memory over an hour"; MALLOC_MMAP_THRESHOLD_=1048576 removes the effect at
a cost in step time). The floor's least-squares slope over the windows (MiB per hour) is printed
beside them: a steady leak shows there first. A window with fewer than half the samples of a full one (the tail of the run) is left
out.

Prints a table; writes nothing; asserts nothing (a benchmark, not a test).
"""
import collections
import json
import re
import sys

GOAL = 0.05


def slope_per_hour(points):
    """Least-squares slope of (seconds, MiB) points, in MiB per hour."""
    n = len(points)
    if n < 2:
        return 0.0
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    sxy = sum((x - mx) * (y - my) for x, y in points)
    return 3600.0 * sxy / sxx if sxx > 0 else 0.0


def main():
    work = sys.argv[1]
    warmup_min = float(sys.argv[2]) if len(sys.argv) > 2 else 5.0
    window_min = float(sys.argv[3]) if len(sys.argv) > 3 else 10.0
    rows = [line.split('\t') for line in open(f"{work}/rss.tsv").read().splitlines()[1:]]
    by_rank = collections.defaultdict(list)  # rank -> [(seconds, rss KiB, peak KiB since the previous sample)]
    for seconds, rank, kib, peak in rows:
        by_rank[int(rank)].append((int(seconds), int(kib), int(peak)))
    log = open(f"{work}/train.log").read()
    steps = re.findall(r"step (\d+)/\d+", log)
    # The sampling interval: the median gap between one rank's samples (soak.sh's SAMPLE_S plus the
    # time a loaded machine takes to read /proc).
    first = sorted(s[0] for s in by_rank[min(by_rank)]) if by_rank else []
    gaps = sorted(b - a for a, b in zip(first, first[1:]))
    sample_s = gaps[len(gaps) // 2] if gaps else 5
    print(f"{len(rows)} samples, last logged step {steps[-1] if steps else '?'}, warm-up {warmup_min:g} min left "
          f"out, windows of {window_min:g} min")
    roles = {int(r): role for r, role in re.findall(r"^\s+(\d+)\s+\S+\s+\S+\s+(data|model|data\+model)\s", log, re.M)}

    print(f"{'rank':<5}{'role':<7}{'windows':>8}{'HWM first':>11}{'HWM last':>10}{'growth':>9}{'drift':>8}"
          f"{'floor first':>13}{'floor last':>11}{'growth':>9}{'drift':>8}{'floor slope':>13}{'swing/min':>11}  flat")
    floor_flat = peak_flat = True
    for rank in sorted(by_rank):
        samples = [s for s in by_rank[rank] if s[0] >= warmup_min * 60]
        if not samples:
            print(f"{rank:<5} no samples after the warm-up")
            continue
        start = samples[0][0]
        windows = collections.defaultdict(list)
        minutes = collections.defaultdict(list)
        for seconds, kib, peak in samples:
            windows[int((seconds - start) // (window_min * 60))].append((kib, peak))
            minutes[seconds // 60].append((seconds, kib, peak))
        full = window_min * 60 / max(sample_s, 1)
        keys = [w for w in sorted(windows) if len(windows[w]) >= full / 2]
        if not keys:
            print(f"{rank:<5} no whole window after the warm-up")
            continue
        hwm = [max(p for _, p in windows[w]) / 1024 for w in keys]
        floor = [min(k for k, _ in windows[w]) / 1024 for w in keys]
        hwm_growth = (hwm[-1] - hwm[0]) / hwm[0]
        floor_growth = (floor[-1] - floor[0]) / floor[0]
        hwm_drift = max(abs(h - hwm[0]) for h in hwm) / hwm[0]
        floor_drift = max(abs(f - floor[0]) for f in floor) / floor[0]
        # The floor's trend over the windows (their midpoints), robust to a minute that caught no floor.
        floor_points = [((w + 0.5) * window_min * 60, f) for w, f in zip(keys, floor)]
        # The swing inside a minute: its peak over its floor (what the old per-minute measure saw).
        swing = max((max(p for _, _, p in minutes[k]) - min(kib for _, kib, _ in minutes[k])) / 1024 for k in minutes)
        flat = abs(hwm_growth) <= GOAL and abs(floor_growth) <= GOAL
        floor_flat = floor_flat and abs(floor_growth) <= GOAL
        peak_flat = peak_flat and abs(hwm_growth) <= GOAL
        print(f"{rank:<5}{roles.get(rank, '?'):<7}{len(keys):>8}{hwm[0]:>11.1f}{hwm[-1]:>10.1f}{100 * hwm_growth:>+8.1f}%"
              f"{100 * hwm_drift:>7.1f}%{floor[0]:>13.1f}{floor[-1]:>11.1f}{100 * floor_growth:>+8.1f}%"
              f"{100 * floor_drift:>7.1f}%{slope_per_hour(floor_points):>+9.1f}MiB/h{swing:>8.1f}MiB  "
              f"{'yes' if flat else 'NO'}")
        print(f"       per window HWM MiB: {' '.join(f'{h:.1f}' for h in hwm)}")
        print(f"       per window floor MiB: {' '.join(f'{f:.1f}' for f in floor)}")
    print(f"retained memory flat (floor of the last window within {100 * GOAL:.0f}% of the first, every rank): "
          f"{'yes' if floor_flat else 'NO'}")
    print(f"peak flat (high-water mark of the last window within {100 * GOAL:.0f}% of the first, every rank): "
          f"{'yes' if peak_flat else 'NO'}")

    # The data rank's bound: credits x the largest padded batch (B x (F x n_mels x 4 + T x 4 + 16)).
    try:
        config = open(f"{work}/run/sluice-train.yaml").read()
        credits = int(re.search(r"credits:\s*(\d+)", config).group(1))
        read_ahead = int(re.search(r"read_ahead:\s*(\d+)", config).group(1))
        n_mels = json.load(open(f"{work}/cache/manifest.json"))["settings"]["features"]["n_mels"]
    except (OSError, AttributeError, KeyError) as error:
        print(f"data rank's bound: not computed ({error})")
        return
    largest = 0
    for F, T, B in re.findall(r"^\s*\d+\s+\d+\.\.(\d+)\s+(\d+)\s+(\d+)\s", log, re.M):
        largest = max(largest, int(B) * (int(F) * n_mels * 4 + int(T) * 4 + 16))
    fed = sum(1 for role in roles.values() if role == "model") or 2
    print(f"data rank's batches in flight: credits {credits} x largest batch {largest / 1024:.0f} KiB x {fed} model ranks "
          f"= {credits * largest * fed / 2**20:.1f} MiB; with the read-ahead ({read_ahead} more per model rank) "
          f"{(credits + read_ahead) * largest * fed / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
