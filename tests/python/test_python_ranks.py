"""Python model ranks end to end (docs/python.md): the real `sluice` binary as the data rank and
Python processes as model ranks, under the real mpirun, on a cache prepared from the sample
corpus. The ranks are plain python3 importing the extension module from the build tree (the
interpreter running this test, PYTHONPATH=BUILD/python), and sluice-python for the cases that
say so. Run by ctest (tests/python/CMakeLists.txt) with SLUICE, SLUICE_PYTHON, MPIEXEC,
SAMPLE_CORPUS, EXAMPLE, SLUICE_PYTHON_EXTENSION and PYTHONPATH in the environment.
"""
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

SLUICE, SLUICE_PYTHON, MPIEXEC = os.environ["SLUICE"], os.environ["SLUICE_PYTHON"], os.environ["MPIEXEC"]
HERE = os.path.dirname(os.path.abspath(__file__))
PROBE = os.path.join(HERE, "feed_probe.py")
DDP_PROBE = os.path.join(HERE, "ddp_probe.py")
NUMPY_PROBE = os.path.join(HERE, "numpy_probe.py")
MIXTURE_PROBE = os.path.join(HERE, "mixture_probe.py")
EXAMPLE = os.environ["EXAMPLE"]
# Plain python3 (this interpreter) imports sluice when the extension module is built.
PYTHON3 = sys.executable if os.environ.get("SLUICE_PYTHON_EXTENSION") == "ON" else SLUICE_PYTHON
# Short runs on a 2-core machine: small batches, no validation or checkpoints (a Python rank does
# its own), no live status line.
COMMON = ["--set", "train.batch_size=4", "--set", "train.n_buckets=2", "--set", "train.log_every=1000",
          "--set", "train.validation_every=0", "--set", "train.checkpoint_every=0", "--set", "runtime.status_every_s=0"]


def read_json(path):
    with open(path) as file:
        return json.load(file)


def data_rank_pid(run_dir):
    """The sluice data rank of the run in `run_dir` (not mpirun, whose command line names it too)."""
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/cmdline") as file:
                argv = file.read().split("\0")
        except OSError:
            continue
        if os.path.basename(argv[0]) == "sluice" and argv[1:2] == ["train"] and run_dir in argv:
            return int(pid)
    raise AssertionError("no sluice data rank with --run-dir " + run_dir)


class CpuQuota:
    """A child cgroup holding its processes to `quota_us` of CPU per `period_us` (cgroup v2 cpu.max,
    else v1 cpu.cfs_*), removed on close(); `ok` is False where cgroups are not writable."""

    def __init__(self, name, quota_us, period_us):
        self.dir = None
        v2 = "/sys/fs/cgroup"
        if os.path.exists(os.path.join(v2, "cgroup.controllers")):
            candidates = [(v2, lambda d: write(os.path.join(d, "cpu.max"), f"{quota_us} {period_us}"))]
            try:
                write(os.path.join(v2, "cgroup.subtree_control"), "+cpu")
            except OSError:
                pass
        else:
            candidates = [("/sys/fs/cgroup/cpu", lambda d: (write(os.path.join(d, "cpu.cfs_period_us"), str(period_us)),
                                                            write(os.path.join(d, "cpu.cfs_quota_us"), str(quota_us))))]
        for root, configure in candidates:
            path = os.path.join(root, name)
            try:
                os.mkdir(path)
                configure(path)
                self.dir = path
            except OSError:
                if os.path.isdir(path):
                    os.rmdir(path)

    @property
    def ok(self):
        return self.dir is not None

    def move(self, pid):
        write(os.path.join(self.dir, "cgroup.procs"), str(pid))

    def close(self):
        if self.dir is None:
            return
        for _ in range(50):  # its processes leave when they end
            with open(os.path.join(self.dir, "cgroup.procs")) as file:
                if not file.read().strip():
                    break
            time.sleep(0.1)
        os.rmdir(self.dir)


def read_text(path):
    with open(path) as file:
        return file.read()


def write(path, text):
    with open(path, "w") as file:
        file.write(text)


def run(command, timeout=240):
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    return result.returncode, result.stdout + result.stderr


class PythonRanks(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp(prefix="sluice-python-test-")
        cls.cache = os.path.join(cls.work, "cache")
        code, output = run([SLUICE, "prep", "--corpus", os.environ["SAMPLE_CORPUS"], "--out", cls.cache,
                            "--set", "cache.shard_size=32"])
        assert code == 0, output

    def command(self, name, steps, python_command, extra=(), ranks=2, python=PYTHON3):
        run_dir = os.path.join(self.work, name)
        sluice = [SLUICE, "train", "--cache", self.cache, "--run-dir", run_dir, "--steps", str(steps), *COMMON, *extra]
        return run_dir, [MPIEXEC, "--oversubscribe", "--bind-to", "none", "-np", "1", *sluice, ":",
                         "-np", str(ranks), python, *python_command]

    def job(self, name, steps, python_command, extra=(), ranks=2, python=PYTHON3):
        run_dir, command = self.command(name, steps, python_command, extra, ranks, python)
        code, output = run(command)
        return run_dir, code, output

    def start_and_wait_for(self, command, path, what):
        """Starts `command` (mpirun ...) and waits up to 180 s for `path` to appear (a rank writes it
        once it got that far); fails the test with the job's output if it never does. Returns the
        running job."""
        job = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + 180
        while not os.path.exists(path) and job.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if not os.path.exists(path):
            job.kill()
            self.fail(what + ":\n" + job.communicate()[0])
        return job

    def records(self, name):
        return [read_json(p) for p in sorted(glob.glob(os.path.join(self.work, name + "-rank*.json")))]

    def probe(self, name, steps, extra=(), probe_args=(), python=PYTHON3):
        out = os.path.join(self.work, name + "-rank{rank}.json")
        run_dir, code, output = self.job(name, steps, [PROBE, out, *probe_args], extra, python=python)
        return run_dir, code, output, self.records(name)

    # The example, under plain python3 (`mpirun -np 1 sluice train ... : -np 2 python3 train.py`),
    # trains: the loss falls, the validation loss at train.validation_every and at the end falls,
    # the report is written and names the Python ranks.
    def test_example_trains_and_the_report_names_the_python_ranks(self):
        out = os.path.join(self.work, "example-{rank}.json")
        run_dir, code, output = self.job("example", 30, [EXAMPLE, "--out", out],
                                         extra=["--set", "train.validation_every=10"])
        self.assertEqual(code, 0, output)
        self.assertIn("model (python) fed by 0", output)  # the role plan
        for rank in (0, 1):
            record = read_json(out.format(rank=rank))
            losses = record["losses"]
            self.assertEqual(len(losses), 30)
            first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
            self.assertLess(last, 0.7 * first, losses)
            validations = record["validations"]
            self.assertEqual([v["global_step"] for v in validations], [10, 20, 30], validations)
            self.assertLess(validations[-1]["loss"], validations[0]["loss"], validations)
        report = read_json(os.path.join(run_dir, "report.json"))
        names = [m["name"] for m in report["model_ranks"]]
        self.assertEqual(len(names), 2, names)
        for name in names:
            self.assertTrue(name.endswith("model (python)"), names)
        for rank in (1, 2):
            timeline = read_json(os.path.join(run_dir, "timeline", f"rank-{rank}.json"))
            self.assertEqual(timeline["role"], "model (python)")
            self.assertEqual(timeline["status"], "finished")
            self.assertEqual(timeline["summary"]["steps"], 30)

    # A script that imports no torch trains with NumPy alone (numpy.from_dlpack of the feed's DLPack
    # producers): the module links no libtorch (issue 30, the ctest python_module_links_no_torch),
    # every batch's mels are the cache's normalised values bit for bit (training batches normalised
    # by the data rank, validation batches in the script's own process), the job exits 0 and torch
    # never enters the process. Then the same script alone: one process feeding itself, the data
    # side's normalisation in the script's process too.
    def test_a_numpy_script_without_torch_trains(self):
        steps, normalize = 20, ["--set", "train.normalize_mels=true"]
        out = os.path.join(self.work, "numpy-{rank}.json")
        run_dir, code, output = self.job("numpy", steps, [NUMPY_PROBE, out, self.cache], extra=normalize)
        self.assertEqual(code, 0, output)
        for rank in (0, 1):
            record = read_json(out.format(rank=rank))
            self.assertEqual(record["steps"], list(range(steps)), output)
            self.assertEqual(record["mels_equal"], [True] * steps, output)
            self.assertGreater(len(record["validation_equal"]), 0, output)
            self.assertEqual(record["validation_equal"], [True] * len(record["validation_equal"]), output)
            losses = record["losses"]
            self.assertLess(sum(losses[-5:]) / 5, 0.7 * sum(losses[:5]) / 5, losses)
            self.assertEqual(record["exit"], 0)
            self.assertFalse(record["torch_imported"])
        for rank in (1, 2):
            timeline = read_json(os.path.join(run_dir, "timeline", f"rank-{rank}.json"))
            self.assertEqual((timeline["role"], timeline["status"]), ("model (python)", "finished"))
            self.assertEqual(timeline["summary"]["steps"], steps)

        alone = os.path.join(self.work, "numpy-alone-{rank}.json")
        overrides = [f"cache.dir={self.cache}", "train.run_dir=" + os.path.join(self.work, "numpy-alone"),
                     "train.steps=8", "train.normalize_mels=true", *[c for c in COMMON if c != "--set"]]
        code, output = run([PYTHON3, NUMPY_PROBE, alone, self.cache, *overrides])
        self.assertEqual(code, 0, output)
        record = read_json(alone.format(rank=0))
        self.assertEqual(record["steps"], list(range(8)), output)
        self.assertEqual(record["mels_equal"], [True] * 8, output)
        self.assertEqual(record["exit"], 0)
        self.assertFalse(record["torch_imported"])

    # train.mixture (docs/architecture.md, "Many corpora, one run"): Python ranks see the caches
    # (feed.corpora, feed.corpus_starts) and each sample's cache (batch.corpus, where torch is
    # installed), and their validation losses are averaged per cache as well as over the split
    # (rank-N.json "validation" records, "corpora"). Also its own ctest, python_ranks_Mixture.
    def test_mixture_python_ranks_see_each_samples_corpus(self):
        short = os.path.join(self.work, "short-cache")
        if not os.path.exists(os.path.join(short, "manifest.json")):
            code, output = run([SLUICE, "prep", "--corpus", os.environ["SAMPLE_CORPUS"], "--out", short, "--set",
                                "cache.shard_size=32", "--set", "prep.max_seconds=4.5", "--set",
                                "prep.max_reject_fraction=0.9"])
            self.assertEqual(code, 0, output)
        out = os.path.join(self.work, "mixture-{rank}.json")
        mixture = ["--mixture", f"{self.cache}:1, {short}:0.5", "--set", "train.validation_fraction=0.2"]
        run_dir, code, output = self.job("mixture", 6, [MIXTURE_PROBE, out], extra=mixture, ranks=2)
        self.assertEqual(code, 0, output)
        for rank in (0, 1):
            record = read_json(out.format(rank=rank))
            self.assertEqual(record["corpora"], [self.cache, short], output)
            self.assertEqual(record["corpus_starts"][0], 0)
            start = record["corpus_starts"][1]
            self.assertGreater(start, 0)
            self.assertEqual(record["exit"], 0, output)
            for batch in record["batches"]:  # with torch: each sample's corpus from its index
                self.assertEqual(batch["corpus"], [int(i >= start) for i in batch["indices"]])
            for corpus in record["validation_corpora"]:  # a validation batch is one corpus's
                self.assertEqual(len(set(corpus)), 1, record["validation_corpora"])
            # Languages and speakers unified over the caches: the sample corpus speaks en and fa.
            self.assertEqual(record["languages"], ["en", "fa"], output)
            self.assertGreater(len(record["speakers"]), 0)
            for batch in record["batches"]:
                self.assertTrue(all(0 <= language < 2 for language in batch["language"]), batch)
                self.assertTrue(all(0 <= speaker < len(record["speakers"]) for speaker in batch["speaker"]), batch)
            for vbatch in record["validation_batches"]:  # ... and one language's
                self.assertEqual(len(set(vbatch["language"])), 1, record["validation_batches"])
        validation = read_json(os.path.join(run_dir, "ranks", "rank-1.json"))["validation"]
        self.assertEqual(validation[0]["global_step"], 3, validation)
        with_torch = read_json(out.format(rank=0))["torch"]
        expected = [1.0, 2.0] if with_torch else [1.0, 1.0]
        self.assertEqual(validation[0]["corpora"], expected, validation)
        # Per language: each batch's loss (1 + its corpus) weighted by its size, over both ranks.
        self.assertEqual(sorted(validation[0]["languages"]), ["en", "fa"], validation)
        if with_torch:
            sums = {0: [0.0, 0], 1: [0.0, 0]}
            for rank in (0, 1):
                for vbatch in read_json(out.format(rank=rank))["validation_batches"]:
                    size = len(vbatch["corpus"])
                    sums[vbatch["language"][0]][0] += (1.0 + vbatch["corpus"][0]) * size
                    sums[vbatch["language"][0]][1] += size
            for language, code in ((0, "en"), (1, "fa")):
                self.assertAlmostEqual(validation[0]["languages"][code], sums[language][0] / sums[language][1], places=5)

    # Every planned batch arrives exactly once per epoch, and a resumed run continues with the
    # same batches from the step it is given.
    def test_every_planned_batch_once_per_epoch_and_resume(self):
        # 113 samples, 2 model ranks, batch 4, 2 buckets: epoch 0 has 14 steps (2 spilled into the
        # longer bucket, 1 deferred); epoch 1 takes that one first and has 15 (a tail step of 1).
        steps = 29  # two whole epochs
        _, code, output, records = self.probe("plan", steps, python=SLUICE_PYTHON)
        self.assertEqual(code, 0, output)
        self.assertEqual(len(records), 2)
        self.assertEqual(records[0]["steps_per_epoch"], 14, output)
        per_epoch = {0: [], 1: []}
        for record in records:
            self.assertEqual([b["global_step"] for b in record["batches"]], list(range(steps)))
            for b in record["batches"]:
                per_epoch[b["epoch"]].extend(b["indices"])
        self.assertIn("113 samples (0 carried in from the epoch before), 14 global steps in epoch 0 for 2 model "
                      "rank(s), 2 spilled into a longer bucket, 1 deferred to the next epoch", output)
        # Epoch 0 trains 112 once and defers 1; epoch 1 trains that one and the 113: over the two
        # epochs every sample exactly twice, nothing lost, nothing deferred past the end.
        self.assertEqual(len(per_epoch[0]), 112)
        self.assertEqual(len(set(per_epoch[0])), 112, "epoch 0 repeats a sample")
        self.assertEqual(len(per_epoch[1]), 114)
        self.assertEqual(len(set(per_epoch[1])), 113)
        both = per_epoch[0] + per_epoch[1]
        self.assertEqual({both.count(i) for i in set(both)}, {2})
        self.assertNotEqual(per_epoch[0], per_epoch[1][:112], "each epoch is shuffled anew")

        # By epoch (feed.epochs()), resumed within epoch 1: the same batches, cut where the epoch
        # changes, the first epoch the rest of epoch 1.
        _, code, output, resumed = self.probe("resume", steps, probe_args=["--resume-step", "17", "--by-epoch"],
                                              python=SLUICE_PYTHON)
        self.assertEqual(code, 0, output)
        for full, part in zip(records, resumed):
            self.assertEqual(part["first_step"], 17)
            self.assertEqual(part["batches"], full["batches"][17:])
            self.assertEqual(part["epochs"], [{"number": 1, "steps": list(range(17, 29))}])
        _, code, output, by_epoch = self.probe("plan-by-epoch", 30, probe_args=["--by-epoch"])
        self.assertEqual(code, 0, output)
        for full, part in zip(records, by_epoch):
            self.assertEqual(part["batches"][:steps], full["batches"])
            self.assertEqual(part["epochs"], [{"number": 0, "steps": list(range(14))},
                                              {"number": 1, "steps": list(range(14, 29))},
                                              {"number": 2, "steps": list(range(29, 30))}])

    # A slowed data rank: the report says input-bound for the Python ranks.
    def test_slow_data_rank_gives_input_bound(self):
        run_dir, code, output, _ = self.probe(
            "slow", 28, extra=["--set", "debug.delay_stage=cache_read", "--set", "debug.delay_ranks=0",
                               "--set", "debug.delay_ms=300", "--set", "train.reader_threads=1"])
        self.assertEqual(code, 0, output)
        report = read_json(os.path.join(run_dir, "report.json"))
        kinds = [v["kind"] for v in report["verdicts"]]
        self.assertIn("input_bound", kinds, output)
        self.assertGreater(report["model_role"]["input_wait_fraction"], 0.5)

    # A bad cache: the Python exception carries the message `sluice train` prints.
    def test_bad_cache_raises_cache_error_with_sluices_message(self):
        missing = os.path.join(self.work, "no-cache")
        code, sluice_output = run([SLUICE, "train", "--cache", missing, "--run-dir", os.path.join(self.work, "bad")])
        self.assertNotEqual(code, 0)
        out = os.path.join(self.work, "bad-cache-{rank}.json")
        code, output = run([PYTHON3, PROBE, out, "--set", "cache.dir=" + missing,
                            "--set", "train.run_dir=" + os.path.join(self.work, "bad-py")])
        self.assertEqual(code, 0, output)
        record = read_json(out.format(rank=0))
        self.assertEqual(record["error"]["class"], "CacheError", output)
        self.assertIn(record["error"]["message"], sluice_output)

    # The script's own config disagrees with rank 0's: the same ConfigError on every rank, no hang.
    def test_mismatched_config_is_a_config_error_everywhere(self):
        _, code, output, records = self.probe("mismatch", 10, probe_args=[
            "--set", "train.batch_size=8", "--set", "cache.dir=" + self.cache])
        self.assertNotEqual(code, 0)
        self.assertEqual(len(records), 2)
        for record in records:
            self.assertEqual(record["error"]["class"], "ConfigError")
            self.assertIn("train.batch_size: 8 here, 4 on rank 0", record["error"]["message"])
            self.assertIn(record["error"]["message"], output)  # sluice's rank 0 printed the same

    # A released batch's sections are refused, as docs/python.md says (issue 27: batch.dlpack(name)
    # of a released batch did not raise).
    def test_a_released_batchs_dlpack_raises(self):
        script = ("import sluice\n"
                  "feed = sluice.Feed()\n"
                  "batches = iter(feed)\n"
                  "first = next(batches)\n"
                  "second = next(batches)\n"
                  "try:\n"
                  "    first.dlpack('mels')\n"
                  "    print('NOT RAISED', flush=True)\n"
                  "except sluice.Error as error:\n"
                  "    print('RAISED:', error, flush=True)\n"
                  "for _ in batches:\n"
                  "    pass\n"
                  "feed.close()\n")
        _, code, output = self.job("released", 4, ["-c", script])
        self.assertEqual(code, 0, output)
        self.assertEqual(output.count("RAISED: the batch of global step 0 was released"), 2, output)
        self.assertNotIn("NOT RAISED", output)

    # A script that raises with its feed open (a bug in the user's step): the job ends at once, and
    # its end names the exception, not the feed left open (issue 27: only "ended without closing
    # its sluice.Feed" was said, amid Open MPI's abort text).
    def test_an_uncaught_exception_is_named_when_the_job_ends(self):
        script = ("import sluice\n"
                  "feed = sluice.Feed()\n"
                  "next(feed)\n"
                  "raise ValueError('boom in the step')\n")
        started = time.monotonic()
        _, code, output = self.job("raised", 10000, ["-c", script])
        self.assertNotEqual(code, 0, output)
        self.assertLess(time.monotonic() - started, 120, output)
        self.assertIn("ends the job (MPI_Abort): the script raised ValueError: boom in the step", output)
        self.assertNotIn("ended without closing", output)

    # A tensor kept past its step (the batch's mels of the first three steps) still shows its own
    # batch at the end of the run, and after feed.close(): its slot stays with the script until it
    # is freed (LEASES in batch_stream.h), said once in the log, and the slots outlive the feed. Keeping as many batches as there are slots
    # (train.credits) is a ConfigError naming the steps held, not a wait for a batch that cannot come.
    def test_a_kept_tensor_keeps_its_own_bytes(self):
        _, code, output, records = self.probe("keep", 12, extra=["--set", "train.credits=5"], probe_args=["--keep", "3"])
        self.assertEqual(code, 0, output)
        self.assertEqual(len(records), 2, output)
        for record in records:
            self.assertEqual(record["kept_equal"], [True, True, True], output)
            self.assertEqual(len(record["batches"]), 12)
            # Read after feed.close() (issue 27: a segfault, exit 139): still their own bytes.
            self.assertEqual(record["kept_equal_after_close"], [True, True, True], output)
            self.assertEqual(record["exit"], 0)
        self.assertIn("the script keeps tensors of global step 0 past its step", output)
        self.assertIn("are still referenced at feed.close(): the feed's receive slots stay allocated", output)

        _, code, output, records = self.probe("keep-all", 12, extra=["--set", "train.credits=3"],
                                              probe_args=["--keep", "3"])
        self.assertNotEqual(code, 0, output)
        for record in records:
            self.assertEqual(record["error"]["class"], "ConfigError", output)
            self.assertIn("holds tensors of every one of its 3 receive slots (global steps 0, 1, 2)",
                          record["error"]["message"])
            self.assertEqual(len(record["batches"]), 3)

    # A negative resume step (issue 27: resume_step=-3 was accepted): the same ConfigError on every
    # rank, said by sluice's rank 0 too, no hang.
    def test_negative_resume_step_is_a_config_error_everywhere(self):
        _, code, output, records = self.probe("negative-resume", 10, probe_args=["--resume-step", "-3"])
        self.assertNotEqual(code, 0)
        self.assertEqual(len(records), 2)
        for record in records:
            self.assertEqual(record["error"]["class"], "ConfigError")
            self.assertIn("sluice.Feed(resume_step=-3)", record["error"]["message"])
            self.assertIn("a global step is 0 or more", record["error"]["message"])
        self.assertIn("sluice.Feed(resume_step=-3)", output)

    # The data rank goes silent: the Python ranks raise TransportError naming it, the job ends.
    def test_silent_data_rank_raises_transport_error_naming_it(self):
        name = "silent"
        _, code, output, records = self.probe(name, 10000, extra=["--set", "runtime.timeout_s=3"],
                                              probe_args=["--stop-data-after", "3", os.path.join(self.work, name)])
        self.assertNotEqual(code, 0)
        errors = [r["error"] for r in records if "error" in r]
        self.assertTrue(errors, output)
        for error in errors:
            self.assertEqual(error["class"], "TransportError")
            self.assertIn("from its data rank 0 (host", error["message"])
        # The first to give up says why; a rank still waiting may see the job's end (MPI_Abort) first.
        self.assertTrue(any("gave no sign of life" in e["message"] for e in errors), errors)


    # Validation batches: at the steps train.validation_every names and at the end, each rank's
    # share of the split (disjoint, together the whole split, never a training sample), the same
    # samples every pass, one validation span per pass in the timeline.
    def test_validation_batches_at_the_validation_steps(self):
        run_dir, code, output, records = self.probe("validate", 13, extra=["--set", "train.validation_every=5"],
                                                    probe_args=["--validate"])
        self.assertEqual(code, 0, output)
        self.assertEqual(len(records), 2)
        shares = []
        for record in records:
            self.assertEqual(record["validation_every"], 5)
            passes = record["validations"]
            self.assertEqual([p["step"] for p in passes], [5, 10, 13], passes)
            self.assertEqual(len(passes[0]["indices"]), record["validation_samples"])
            self.assertGreater(record["validation_samples"], 0)
            for p in passes[1:]:
                self.assertEqual(p["indices"], passes[0]["indices"])
            shares.append(set(passes[0]["indices"]))
            timeline = read_json(os.path.join(run_dir, "timeline", f"rank-{record['mpi_rank']}.json"))
            validation_stage = timeline["stages"].index("validation")
            self.assertEqual(sum(1 for span in timeline["spans"] if span[1] == validation_stage), 3)
        self.assertFalse(shares[0] & shares[1], "the ranks' validation shares overlap")
        training = {i for record in records for b in record["batches"] for i in b["indices"]}
        self.assertFalse((shares[0] | shares[1]) & training, "a validation sample was trained on")
        # 113 training samples (test_every_planned_batch_once_per_epoch_and_resume); the rest validate.
        self.assertEqual(len(shares[0] | shares[1]) + 113, read_json(os.path.join(self.cache, "manifest.json"))["totals"]["samples"])

    # Starts a long run of the probe, sends SIGUSR1 once model rank 0 trained 3 batches (`target`:
    # "mpirun", "python1" model rank 1 only, "data" the sluice data rank only), and checks that
    # the Python ranks' feeds ended at one agreed step, each probe's feed.close() returned 4, the
    # job exited 4 (stopped) and the data rank's timeline says stopped; then that a run resumed at
    # that step starts with the next unseen batch. Returns the records.
    def stop_and_resume(self, name, target):
        ready = os.path.join(self.work, name + "-ready")
        out = os.path.join(self.work, name + "-rank{rank}.json")
        pid_file = os.path.join(self.work, name + "-pid-{rank}")
        run_dir, command = self.command(name, 100000, [PROBE, out, "--pace", "0.05", "--ready-after", "3", ready,
                                                       "--pid-file", pid_file])
        job = self.start_and_wait_for(command, ready, "the Python ranks did not start training")
        if target == "mpirun":
            job.send_signal(signal.SIGUSR1)
        elif target == "python1":
            with open(pid_file.format(rank=1)) as file:
                os.kill(int(file.read()), signal.SIGUSR1)
        else:
            os.kill(data_rank_pid(run_dir), signal.SIGUSR1)
        try:
            output, _ = job.communicate(timeout=180)
        except subprocess.TimeoutExpired:  # the run went on: it did not stop
            job.terminate()  # mpirun ends its ranks on SIGTERM
            try:
                output, _ = job.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                job.kill()
                output, _ = job.communicate()
            self.fail(f"SIGUSR1 to {target} did not stop the job:\n" + output)
        self.assertEqual(job.returncode, 4, output)  # train_stopped (docs/operations.md)
        records = self.records(name)
        self.assertEqual(len(records), 2, output)
        stopped_at = records[0]["stopped_at"]
        self.assertIsNotNone(stopped_at, output)
        self.assertGreaterEqual(stopped_at, 3)
        for record in records:
            self.assertEqual(record["stopped_at"], stopped_at)
            self.assertEqual(record["exit"], 4)
            self.assertEqual([b["global_step"] for b in record["batches"]], list(range(stopped_at)))
        data_rank = read_json(os.path.join(run_dir, "timeline", "rank-0.json"))
        self.assertEqual(data_rank["status"], "stopped", output)
        self.assertIn("stopped", read_json(os.path.join(run_dir, "ranks", "rank-0.json")))

        _, code, output, resumed = self.probe(name + "-resumed", stopped_at + 3,
                                              probe_args=["--resume-step", str(stopped_at)])
        self.assertEqual(code, 0, output)
        for record in resumed:
            self.assertEqual([b["global_step"] for b in record["batches"]], [stopped_at, stopped_at + 1, stopped_at + 2])
        return records

    # Preemption: SIGUSR1 to mpirun (what slurm/train.sbatch sends on SIGTERM) reaches every rank;
    # the Python ranks' feeds end at one agreed step, the script can checkpoint, the job exits 4
    # (stopped), and a run resumed at that step starts with the next unseen batch.
    def test_sigusr1_to_mpirun_stops_the_python_ranks_at_one_step(self):
        for record in self.stop_and_resume("stop", "mpirun"):
            self.assertEqual(record["stop_signal"], "SIGUSR1")

    # SIGUSR1 to one Python rank only (not mpirun): the model ranks' agreement stops both at one
    # step; the data rank, whose channels they close, takes that as the stop (exit 4, "stopped").
    def test_sigusr1_to_one_python_rank_stops_the_job_at_one_step(self):
        records = {r["rank"]: r for r in self.stop_and_resume("stop-one", "python1")}
        self.assertEqual(records[1]["stop_signal"], "SIGUSR1")
        self.assertIsNone(records[0]["stop_signal"])  # it stopped by the agreement alone

    # SIGUSR1 to the data rank only: the next batch it sends says so (data_rank_stop), the model
    # ranks stop at one step as if they had the signal, and the job exits 4.
    def test_sigusr1_to_the_data_rank_stops_the_job_at_one_step(self):
        for record in self.stop_and_resume("stop-data", "data"):
            self.assertIsNone(record["stop_signal"])

    # One Python rank sleeps 0.8 s in each step: the report names it, and only it, as the straggler.
    def test_sleeping_python_rank_is_named_straggler(self):
        run_dir, code, output, records = self.probe("straggler", 28, probe_args=["--sleep-rank", "1", "0.8"])
        self.assertEqual(code, 0, output)
        sleeper = next(r["mpi_rank"] for r in records if r["rank"] == 1)
        report = read_json(os.path.join(run_dir, "report.json"))
        stragglers = [v for v in report["verdicts"] if v["kind"] == "straggler"]
        self.assertEqual([v["rank"] for v in stragglers], [sleeper], report["verdicts"])


    # DDP (gloo) between the two Python ranks, model rank 1 sleeping 0.5 s in each step: outside
    # the spans it marks, and separately inside its forward span. Its DDP peer waits for it inside
    # backward, in the gradient all-reduce. The report names the sleeper, and only it, as the
    # straggler; the peer's wait is its exposed all-reduce (feed.watch_ddp), not its own work.
    def test_ddp_straggler_is_the_slow_rank_not_its_waiting_peer(self):
        for where in ("gap", "forward"):
            with self.subTest(sleep_in=where):
                name = "ddp-sleep-" + where
                out = os.path.join(self.work, name + "-rank{rank}.json")
                run_dir, code, output = self.job(name, 28, [DDP_PROBE, out, "--sleep-rank", "1", "0.5",
                                                            "--sleep-in", where])
                self.assertEqual(code, 0, output)
                slow, fast = (read_json(out.format(rank=r))["mpi_rank"] for r in (1, 0))
                report = read_json(os.path.join(run_dir, "report.json"))
                stragglers = [v["rank"] for v in report["verdicts"] if v["kind"] == "straggler"]
                self.assertEqual(stragglers, [slow], report["verdicts"])
                exposed = {m["rank"]: m["stages"]["allreduce_exposed"]["per_step"]["p50"] for m in report["model_ranks"]}
                self.assertGreater(exposed[fast], 0.3, report["model_ranks"])
                self.assertLess(exposed[slow], 0.1, report["model_ranks"])

    # The same DDP pair with model rank 1 held to 0.2 cores from outside, by a cgroup CPU quota (2
    # ms of every 10 ms, so every step is slowed, not one in ten): the report says the quota held
    # it (descheduled), never takes its waiting peer for the straggler, and names it the straggler
    # when its own work per step is clearly the longer (as the C++ ranks' quota test,
    # tests/runtime/test_report_external_faults.cpp).
    def test_ddp_rank_under_a_cpu_quota_is_the_straggler_not_its_peer(self):
        quota = CpuQuota(f"sluice-test-python-quota-{os.getpid()}", 2000, 10000)
        if not quota.ok:
            self.skipTest("no writable cgroup cpu controller here (needs root and /sys/fs/cgroup)")
        name = "ddp-quota"
        out = os.path.join(self.work, name + "-rank{rank}.json")
        pid_file = os.path.join(self.work, name + "-pid-{rank}")
        try:
            run_dir, command = self.command(name, 40, [DDP_PROBE, out, "--pid-file", pid_file])
            job = self.start_and_wait_for(command, pid_file.format(rank=1), "model rank 1 never set up DDP")
            with open(pid_file.format(rank=1)) as file:
                quota.move(int(file.read()))
            output, _ = job.communicate(timeout=300)
        finally:
            quota.close()
        self.assertEqual(job.returncode, 0, output)
        slow, fast = (read_json(out.format(rank=r))["mpi_rank"] for r in (1, 0))
        report = read_json(os.path.join(run_dir, "report.json"))
        held = [v for v in report["verdicts"] if v["kind"] == "descheduled"]
        self.assertEqual([v["rank"] for v in held], [slow], report["verdicts"])
        self.assertEqual(held[0]["numbers"]["cause"], "cpu_quota", held[0])
        stragglers = [v["rank"] for v in report["verdicts"] if v["kind"] == "straggler"]
        self.assertNotIn(fast, stragglers, report["verdicts"])
        ranks = {m["rank"]: m for m in report["model_ranks"]}
        exposed = {r: m["stages"]["allreduce_exposed"]["per_step"]["p50"] for r, m in ranks.items()}
        self.assertGreater(exposed[fast], exposed[slow], report["model_ranks"])  # the peer waits in the all-reduce
        busy = {r: m["busy_seconds"]["p50"] for r, m in ranks.items()}
        if busy[slow] >= 2 * busy[fast]:
            self.assertEqual(stragglers, [slow], report["verdicts"])
        else:
            print(f"note: the quota made rank {slow}'s own work {busy[slow]:.3f} s per step against {busy[fast]:.3f} "
                  "s: not clearly longer on this machine, so only the descheduled verdict is required", flush=True)
            self.assertLessEqual(len(stragglers), 1, report["verdicts"])

    # Another process stops one Python rank 180 ms of every 200 ms (SIGSTOP, SIGCONT) while it
    # trains: the report names it, and only it, as descheduled (stopped or starved of CPU), as it
    # names a C++ rank (tests/runtime/test_report_external_faults.cpp).
    def test_stopped_python_rank_is_named_descheduled(self):
        name = "descheduled"
        pid_file = os.path.join(self.work, name + "-pid-{rank}")
        out = os.path.join(self.work, name + "-rank{rank}.json")
        run_dir, command = self.command(name, 28, [PROBE, out, "--pace", "0.05", "--pid-file", pid_file])
        job = self.start_and_wait_for(command, pid_file.format(rank=1), "model rank 1 never opened its feed")
        with open(pid_file.format(rank=1)) as file:
            stopped = int(file.read())
        done = threading.Event()

        def stop_and_continue():
            while not done.is_set():
                try:
                    os.kill(stopped, signal.SIGSTOP)
                    time.sleep(0.18)
                    os.kill(stopped, signal.SIGCONT)
                except ProcessLookupError:  # the rank ended
                    return
                time.sleep(0.02)

        stopper = threading.Thread(target=stop_and_continue)
        stopper.start()
        try:
            output, _ = job.communicate(timeout=300)
        finally:
            done.set()
            stopper.join()
            try:
                os.kill(stopped, signal.SIGCONT)
            except ProcessLookupError:
                pass
        self.assertEqual(job.returncode, 0, output)
        mpi_rank = next(r["mpi_rank"] for r in self.records(name) if r["rank"] == 1)
        report = read_json(os.path.join(run_dir, "report.json"))
        descheduled = [v for v in report["verdicts"] if v["kind"] == "descheduled"]
        self.assertEqual([v["rank"] for v in descheduled], [mpi_rank], report["verdicts"])
        self.assertEqual(descheduled[0]["numbers"]["cause"], "stopped_or_starved", descheduled[0])
        self.assertLess(descheduled[0]["numbers"]["ran_fraction"], 0.5, descheduled[0])


def rank_pid(marker, mpi_rank):
    """The process of MPI rank `mpi_rank` whose command line holds `marker` (a run's own path)."""
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/cmdline") as file:
                argv = file.read().split("\0")
            with open(f"/proc/{pid}/environ") as file:
                environ = file.read().split("\0")
        except OSError:
            continue
        if any(marker in a for a in argv) and f"OMPI_COMM_WORLD_RANK={mpi_rank}" in environ:
            return int(pid)
    raise AssertionError(f"no rank {mpi_rank} of the run at {marker}")


class ModelRankContract(unittest.TestCase):
    """One model side (runtime/train/batch_stream.h): the same cases, run against C++ model ranks
    (`mpirun -np 3 sluice train`: a data rank and two model ranks) and Python model ranks (`mpirun
    -np 1 sluice train : -np 2 python3 feed_probe.py`), must end the same way."""

    KINDS = ("cpp", "python")
    setUpClass = classmethod(PythonRanks.setUpClass.__func__)
    command, start_and_wait_for, records = PythonRanks.command, PythonRanks.start_and_wait_for, PythonRanks.records

    def contract_job(self, kind, name, steps, extra=(), probe_args=()):
        """The job's command for `kind`; MPI ranks 1 and 2 are its model ranks either way."""
        if kind == "python":
            out = os.path.join(self.work, name + "-rank{rank}.json")
            return self.command(name, steps, [PROBE, out, *probe_args], extra)
        run_dir = os.path.join(self.work, name)
        return run_dir, [MPIEXEC, "--oversubscribe", "--bind-to", "none", "-np", "3", SLUICE, "train", "--cache",
                         self.cache, "--run-dir", run_dir, "--steps", str(steps), *COMMON, *extra]

    # A non-finite loss on one model rank stops every model rank at that step, before a checkpoint
    # or another batch: the error names the step and the rank, the job fails. The C++ ranks
    # diverge for real (a learning rate of 10); the Python rank reports the NaN a diverged script
    # would compute.
    def test_nonfinite_loss_stops_every_model_rank_at_one_step(self):
        for kind in self.KINDS:
            with self.subTest(kind=kind):
                name = "nonfinite-" + kind
                diverge = ["--set", "optim.lr=10", "--set", "optim.weight_decay=10", "--set", "optim.grad_clip=0",
                           "--set", "optim.warmup_steps=0"] if kind == "cpp" else []
                run_dir, command = self.contract_job(kind, name, 60, diverge, ["--nan-loss-at", "5", "1"])
                code, output = run(command)
                self.assertNotEqual(code, 0, output)
                said = "the training loss is not finite at global step "
                self.assertIn(said, output)
                step = int(output[output.index(said) + len(said):].split()[0])
                self.assertIn("on model rank", output[output.index(said):])
                self.assertIn("Stopped without writing a checkpoint", output)
                if kind == "python":
                    self.assertEqual(step, 5, output)
                    self.assertIn("on model rank 2 (host", output)  # model rank 1 is MPI rank 2
                    records = self.records(name)
                    self.assertEqual(len(records), 2, output)
                    for record in records:  # both stopped at the same step, neither trained past it
                        self.assertIn(said + "5 ", record["error"]["message"])
                        self.assertEqual([b["global_step"] for b in record["batches"]], list(range(6)))
                else:
                    self.assertFalse(os.path.exists(os.path.join(run_dir, "checkpoints", f"step-{step + 1:010d}.pt")))

    # SIGUSR1 to one model rank only (MPI rank 2): the model ranks agree to stop at one step, the
    # data rank takes its closed channels as the stop, the job exits 4 and every rank says stopped.
    def test_stop_signal_to_one_model_rank_stops_every_rank_at_one_step(self):
        for kind in self.KINDS:
            with self.subTest(kind=kind):
                name = "contract-stop-" + kind
                ready = os.path.join(self.work, name + ".ready")
                if kind == "python":
                    run_dir, command = self.contract_job(kind, name, 100000, (), ["--ready-after", "3", ready])
                    job = self.start_and_wait_for(command, ready, "the Python ranks never took 3 batches")
                else:
                    run_dir, command = self.contract_job(kind, name, 100000, ["--set", "train.log_every=1"])
                    with open(ready, "w") as log:
                        job = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, text=True)
                    deadline = time.monotonic() + 180
                    while job.poll() is None and time.monotonic() < deadline and "step 3/" not in read_text(ready):
                        time.sleep(0.05)
                os.kill(rank_pid(run_dir if kind == "cpp" else os.path.join(self.work, name), 2), signal.SIGUSR1)
                try:
                    output = job.communicate(timeout=180)[0] or read_text(ready)
                except subprocess.TimeoutExpired:
                    job.kill()
                    self.fail(f"SIGUSR1 to one {kind} model rank did not stop the job")
                self.assertEqual(job.returncode, 4, output)
                stopped = [read_json(os.path.join(run_dir, "ranks", f"rank-{r}.json"))["stopped_at"] for r in (1, 2)]
                self.assertEqual(stopped[0], stopped[1], output)
                self.assertGreaterEqual(stopped[0], 3, output)
                for r in (0, 1, 2):
                    self.assertEqual(read_json(os.path.join(run_dir, "timeline", f"rank-{r}.json"))["status"], "stopped")


if __name__ == "__main__":
    program = unittest.main(verbosity=2, exit=False)
    passed = program.result.wasSuccessful()
    # The caches and run directories go when every test passed and stay for a look when one failed
    # (KEEP_WORK=1 keeps them either way), as the C++ tests' scratch folders do.
    work = getattr(PythonRanks, "work", None)
    if work is not None:
        if passed and not os.environ.get("KEEP_WORK"):
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"kept {work}")
    sys.exit(0 if passed else 1)
