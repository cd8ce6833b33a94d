#!/usr/bin/env python3
"""Where a `sluice prep` job's CPU went, from `perf script -F comm,tid,ip,sym,dso` of a
`perf record --call-graph dwarf` run (bench/prep/profile_prep.sh makes one).

Every sample is put in one thread role (worker, writer, or the rank's main thread; other
processes, such as mpirun, by their name) and one category: the first rule below whose function
appears anywhere in the sample's stack, in the order listed (so `mel` wins over `page faults`
inside the mel). CPU-seconds are the samples' share of the total CPU the run measured. Samples
whose stack perf could not unwind (more of them under mpirun) are listed apart, by library:
libfftw3f and libm there are mostly the mel's.

    prep_profile.py SCRIPT_OUTPUT TOTAL_CPU_SECONDS [MEL_ONLY_CPU_SECONDS]

MEL_ONLY_CPU_SECONDS (the mel alone on the same audio, e.g. from `sluice bench mel`) adds what
the job's CPU is as a multiple of the mel alone.
"""
import collections
import sys

ROLES = [("worker", "State::worker"), ("writer", "State::writer")]
CATEGORIES = [
    ("mel (MelExtractor::compute)", "MelExtractor::compute"),
    ("header probe", "probe_share"), ("header probe", "probe_audio"),
    ("decode: read the file", "read_file_start"),
    ("decode: samples", "load_audio"),
    ("text", "TextNormalizer"), ("text", "detect_language"), ("text", "Vocabulary::encode"),
    ("text", "Phonemizer"),
    ("check_finite_features", "check_finite_features"),
    ("commit: fsync file and directory", "fsync_path"),
    ("commit: columns, strings, attributes, close", "write_everything"),
    ("append: pwrite of /mel chunks (kernel copy)", "__libc_pwrite"),
    ("append: fletcher32", "h5::fletcher32"),
    ("append: per-bin sums", "MelSums::add_frames"),
    ("append: finite check", "all_finite"),
    ("append: HDF5 chunk index, extent, copy", "ShardWriter::append"),
    ("shard create", "ShardWriter::ShardWriter"),
    ("corpus listing", "read_corpus"),
    ("kept-shard check", "keep_finished_shard"),
    ("index.h5", "write_index"),
    ("manifest, rejects", "finalize"),
    ("prep report + trace (report/)", "write_finished"), ("prep report + trace (report/)", "prep_report"),
    ("MPI init", "MpiSession::MpiSession"), ("MPI init", "PMPI_Init"), ("MPI finalize", "MPI_Finalize"),
    ("MPI finalize", "~MpiSession"),
    ("dynamic loader (start-up)", "_dl_start"), ("dynamic loader (start-up)", "_dl_init"),
    ("dynamic loader (start-up)", "_dl_relocate_object"),
    ("exit handlers", "__run_exit_handlers"), ("exit handlers", "_dl_fini"), ("exit handlers", "__cxa_finalize"),
    ("config, fingerprint", "Config::load"), ("config, fingerprint", "compute_fingerprint"),
    ("heartbeats, polling", "supervise"), ("heartbeats, polling", "follow"),
    ("page faults", "asm_exc_page_fault"),
    ("waits", "futex"), ("waits", "nanosleep"), ("waits", "pthread_cond"),
]


def read_samples(path):
    samples, current = [], None
    for line in open(path, errors="replace"):
        if not line.strip():
            if current is not None:
                samples.append(current)
            current = None
            continue
        if not line.startswith(("\t", " ")):
            current = (line.split()[0], [])  # comm
            continue
        parts = line.strip().split(" ", 1)
        if current is not None and len(parts) == 2:
            current[1].append(parts[1])
    if current is not None:
        samples.append(current)
    return samples


def classify(comm, stack):
    role = "main" if comm.startswith("sluice") else comm
    for name, marker in ROLES:
        if any(marker in frame for frame in stack):
            role = name
            break
    else:
        # A stack perf could not unwind to its thread's start (neither main's nor a thread's entry)
        # cannot be given a role: say so rather than count it as the main thread's.
        if role == "main" and not any(("_start" in frame or "start_thread" in frame or "clone" in frame)
                                      for frame in stack):
            role = "stack not unwound (by its innermost library)"
    for name, marker in CATEGORIES:
        if any(marker in frame for frame in stack):
            return role, name
    leaf = stack[0] if stack else "?"
    library = leaf.rsplit("(", 1)[-1].rstrip(")").split("/")[-1] if "(" in leaf else "?"
    return role, "other: " + library


def main():
    samples = read_samples(sys.argv[1])
    total = float(sys.argv[2])
    mel_only = float(sys.argv[3]) if len(sys.argv) > 3 else None
    counts = collections.Counter(classify(comm, stack) for comm, stack in samples)
    n = max(1, len(samples))
    print(f"{len(samples)} samples over {total:.2f} CPU-s")
    for role in dict.fromkeys(r for r, _ in sorted(counts, key=lambda k: -sum(v for (r, _), v in counts.items() if r == k[0]))):
        in_role = sum(v for (r, _), v in counts.items() if r == role)
        print(f"{role:<48}{100 * in_role / n:6.1f}%{total * in_role / n:8.2f} s")
        for (r, category), v in counts.most_common():
            if r == role and v / n >= 0.002:
                print(f"    {category:<44}{100 * v / n:6.1f}%{total * v / n:8.2f} s")
    mel = sum(v for (r, c), v in counts.items() if c.startswith("mel "))
    lost_mel = sum(v for (r, c), v in counts.items()
                   if r.startswith("stack not unwound") and ("libfftw3f" in c or "libm." in c))
    print(f"the mel is {100 * mel / n:.1f}% of the job's CPU"
          + (f" ({100 * (mel + lost_mel) / n:.1f}% with the not-unwound samples in FFTW and libm)" if lost_mel else "")
          + f": the ratio prep / mel alone by CPU cannot pass {(mel + lost_mel) / n:.2f} while the rest stays")
    if mel_only:
        print(f"the job's CPU is {total / mel_only:.2f}x the mel alone's ({mel_only:.2f} s); the mel inside prep "
              f"took {total * mel / n / mel_only:.2f}x the mel alone")


if __name__ == "__main__":
    main()
