"""sluice for PyTorch training scripts: a Python process as a model rank of a `sluice train` job.

    import sluice
    feed = sluice.Feed()                  # joins the job: role plan, cache, batch plan, data rank
    feed.init_process_group("gloo")       # torch.distributed among the model ranks (DDP)
    for batch in feed:                    # batch.tokens, .token_lens, .mels, .mel_lens
        with feed.span("forward"): loss = model(batch.tokens.long(), ...)
        ...
    feed.close()                          # the timeline joins the others; rank 0 writes the report

Launch: mpirun -np 1 sluice train -c cfg.yaml : -np 2 python3 train.py (the extension module
_sluice beside this file; or sluice-python, python3 with the module built in). See docs/python.md.

Tensors are views of the receive slot (DLPack, no copy). A tensor kept past its step keeps its
slot from the data rank until it is freed, so it never shows another batch's bytes, but the data
rank reads ahead one batch less meanwhile: .clone() what you keep longer (docs/python.md).
"""
import atexit
import bisect
import contextlib
import os
import sys

if "_sluice" in sys.builtin_module_names:  # sluice-python: built into the interpreter
    from _sluice import (CacheError, ConfigError, DataError, Error, TransportError, now_ns,  # noqa: F401
                         FeedHandle as _FeedHandle, _script_raised, _shutdown, allocator as _allocator)
else:  # plain python3: the extension module beside this file
    try:
        from ._sluice import (CacheError, ConfigError, DataError, Error, TransportError, now_ns,  # noqa: F401
                              FeedHandle as _FeedHandle, _script_raised, _shutdown, allocator as _allocator)
    except ImportError as error:
        raise ImportError(f"sluice's model-rank module _sluice is missing or did not load ({error}): build sluice "
                          "with -DSLUICE_PYTHON_EXTENSION=ON (the default) and import it from BUILD/python "
                          "(PYTHONPATH) or the installed package, or run the script with sluice-python") from None

__all__ = ["Feed", "Batch", "Epoch", "Error", "ConfigError", "DataError", "CacheError", "TransportError"]

atexit.register(_shutdown)
_excepthook = sys.excepthook


def _note_uncaught(kind, value, traceback):
    """An exception ends the script: Python prints it, and the job's end (_shutdown) names it."""
    _excepthook(kind, value, traceback)
    _script_raised(f"{kind.__name__}: {value}")


sys.excepthook = _note_uncaught


# The rank's share of the node's cores (feed.compute_threads), for torch's thread pool once torch
# is in the process; None when given already.
_torch_threads = None


def _torch():
    """torch, imported on first use (a batch first turned into tensors, feed.device): the module
    links no torch and works without it. The first use gives torch the rank's share of the cores,
    as sluice's C++ model ranks size their pool."""
    global _torch_threads
    import torch
    if _torch_threads is not None:
        torch.set_num_threads(_torch_threads)
        _torch_threads = None
    return torch


def _synchronize(gpu):
    """Waits for the GPU work queued on `gpu` before a slot goes back to the data rank, where torch
    queued it; a script on another framework synchronises its own stream (docs/python.md)."""
    if "torch" in sys.modules:
        _torch().cuda.synchronize(gpu)


class Batch:
    """One planned batch of this rank. Tensor attributes view the receive slot (zero copy):

    tokens int32 [B, T] (0 = padding), token_lens int32 [B], mels float32 [B, F, n_mels]
    (normalised as the config says; 0 = padding), mel_lens int32 [B], indices int64 [B] (cache
    sample indices). global_step, epoch, step (within the epoch), size (B). corpus: int64 [B],
    the position of each sample's cache in Feed.corpora (train.mixture; all 0 for one cache).
    language, speaker: int64 [B], each sample's position in Feed.languages and Feed.speakers
    (unified over a mixture's caches: a language is its code, a speaker its cache's).
    Its attributes are given until the feed hands out the next batch; a tensor taken before
    stays valid, and holds the slot, for as long as it is referenced.
    """

    __slots__ = ("_handle", "_tensors", "_corpus_starts", "_labels", "global_step", "epoch", "step", "size")

    def __init__(self, handle, corpus_starts=(0,), labels=None):
        self._handle = handle
        self._tensors = {}
        self._corpus_starts = corpus_starts
        self._labels = labels  # indices -> (languages, speakers): the feed's tables
        self.global_step, self.epoch, self.step, self.size = handle.global_step, handle.epoch, handle.step, handle.size

    def dlpack(self, name):
        """The section `name` as a DLPack producer (__dlpack__), for any framework that speaks DLPack."""
        return getattr(self._handle, name)

    def _let_go(self):
        """Drops this Batch's own tensors as the feed moves on: their slot (or validation bytes)
        can go back; tensors the script kept still hold theirs."""
        self._tensors.clear()

    def _tensor(self, name):
        tensor = self._tensors.get(name)
        if tensor is None:
            tensor = self._tensors[name] = _torch().from_dlpack(getattr(self._handle, name))
        return tensor

    tokens = property(lambda self: self._tensor("tokens"))
    token_lens = property(lambda self: self._tensor("token_lens"))
    mels = property(lambda self: self._tensor("mels"))
    mel_lens = property(lambda self: self._tensor("mel_lens"))
    indices = property(lambda self: self._tensor("indices"))

    @property
    def corpus(self):
        tensor = self._tensors.get("corpus")
        if tensor is None:
            starts = self._corpus_starts
            corpora = [bisect.bisect_right(starts, int(i)) - 1 for i in self.indices.tolist()]
            tensor = self._tensors["corpus"] = _torch().tensor(corpora, dtype=_torch().int64)
        return tensor

    def _labelled(self, name):
        tensor = self._tensors.get(name)
        if tensor is None:
            languages, speakers = self._labels(self.indices.tolist())
            self._tensors["language"] = _torch().tensor(languages, dtype=_torch().int64)
            self._tensors["speaker"] = _torch().tensor(speakers, dtype=_torch().int64)
            tensor = self._tensors[name]
        return tensor

    language = property(lambda self: self._labelled("language"))
    speaker = property(lambda self: self._labelled("speaker"))


class Feed:
    """This process's place in a `sluice train` job as a model rank.

    config, overrides: the script's own config file and KEY=VALUE overrides. Leave them out to
        take rank 0's (`sluice train -c ...`); when given, they must match it (else ConfigError
        on every rank). Required when the script runs alone (one process feeds itself).
    resume_step: the global step to continue from (the script's own checkpoint); the data ranks
        start the feed there, with the next unseen batch.
    Raises sluice.ConfigError / CacheError / TransportError with the message sluice prints.
    """

    def __init__(self, config=None, overrides=(), resume_step=None):
        self._handle = _FeedHandle(os.fspath(config) if config else "", list(overrides),
                                   -1 if resume_step is None else int(resume_step))
        info = self._handle.info
        self.rank = info["rank"]              # among the model ranks: torch.distributed's rank
        self.world_size = info["world_size"]  # the model ranks: torch.distributed's world size
        self.mpi_rank, self.mpi_size, self.host = info["mpi_rank"], info["mpi_size"], info["host"]
        self.gpu = info["gpu"]
        self.first_step, self.end_step = info["first_step"], info["end_step"]
        self.steps_per_epoch = info["steps_per_epoch"]
        self.vocab_size, self.n_mels = info["vocab_size"], info["n_mels"]  # the cache's
        self.data_rank, self.transport, self.run_dir = info["data_rank"], info["transport"], info["run_dir"]
        self.rendezvous = info["rendezvous"]  # "HOST:PORT", agreed by the model ranks
        self.validation_every = info["validation_every"]      # train.validation_every (0: only at the end)
        self.validation_samples = info["validation_samples"]  # this rank's share of the validation split
        self.compute_threads = info["compute_threads"]  # this rank's share of the node's cores
        self.corpora = list(info["corpora"])  # the caches trained on (train.mixture's, or cache.dir)
        self.corpus_starts = tuple(info["corpus_starts"])  # where each one's cache indices begin
        self.languages = list(info["languages"])  # language codes: Batch.language points here
        self.speakers = list(info["speakers"])    # speaker codes, each cache's: Batch.speaker points here
        global _torch_threads
        _torch_threads = self.compute_threads
        if "torch" in sys.modules:  # the script has torch already: its pool gets the share now
            _torch()
        self._batch = None
        self._pending = None  # epochs(): a batch taken from the feed, not yet handed out
        self._bucket_ready_ns = None  # watch_ddp(): when DDP's last gradient bucket of a backward was ready
        if self.gpu < 0 and self.rank == 0 and _allocator() == "system":
            # glibc's malloc page-faults a CPU model's activations afresh every step while the
            # batches are zero-copy views (docs/python.md, "Allocator"); said once per job.
            print("sluice: this Python rank trains on the CPU with glibc's malloc; preloading tcmalloc "
                  "(LD_PRELOAD=libtcmalloc_minimal.so.4) made the example's steps 1.5-1.7x faster "
                  "(docs/python.md, \"Allocator\")", file=sys.stderr, flush=True)

    @property
    def device(self):
        """torch.device for the model: cuda:GPU when the config's model.device is cuda, else cpu."""
        torch = _torch()
        return torch.device(f"cuda:{self.gpu}") if self.gpu >= 0 else torch.device("cpu")

    def __len__(self):
        return self.end_step - self.first_step

    def init_process_group(self, backend=None, **kwargs):
        """torch.distributed.init_process_group among the model ranks, at the agreed rendezvous.
        backend: gloo on the CPU, nccl on GPUs (the default picks by device)."""
        import torch.distributed as dist
        if backend is None:
            backend = "nccl" if self.gpu >= 0 else "gloo"
        dist.init_process_group(backend, init_method=f"tcp://{self.rendezvous}", rank=self.rank,
                                world_size=self.world_size, **kwargs)
        return dist

    def watch_ddp(self, model):
        """Lets this rank's timeline tell DDP's gradient all-reduce apart from backward. Registers a
        communication hook on the DistributedDataParallel `model` (the default all-reduce, plus a
        note of when each gradient bucket is ready); a `backward` span then ends where the last
        bucket was ready, and the rest of it (waiting for the all-reduce to finish: for slower
        ranks, or the network) is recorded as allreduce_exposed. Without it a fast rank's backward
        holds its wait for a slow one, and the report may take the waiting rank for the slow one.
        Call once, before training; returns `model`."""
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        def allreduce_noting_ready(process_group, bucket):
            self._bucket_ready_ns = now_ns()  # on autograd's thread: a plain store
            return default_hooks.allreduce_hook(process_group, bucket)

        model.register_comm_hook(None, allreduce_noting_ready)
        return model

    def __iter__(self):
        return self

    def __next__(self):
        """The next planned batch. Ends the iteration after the last step, or early, at the same
        step on every model rank, when any of them got SIGTERM/SIGUSR1 (see stopped_at)."""
        if self._pending is not None:  # the first batch of the next epoch, taken by epochs()
            self._pending, batch = None, self._pending
            return batch
        if self._batch is not None:
            if self.gpu >= 0:
                # Slots go back to the data rank: no queued kernel may still read them.
                _synchronize(self.gpu)
            self._batch._let_go()
        self._batch = None
        handle = self._handle.next()
        if handle is None:
            raise StopIteration
        self._batch = Batch(handle, self.corpus_starts, self._handle.labels)
        return self._batch

    def epochs(self):
        """The feed by epoch, for scripts written as `for epoch ...: for batch in loader`:

            for epoch in feed.epochs():      # epoch.number: the plan's epoch
                for batch in epoch:          # its planned batches, in order
                    ...

        The same batches as `for batch in feed`, cut where batch.epoch changes: a run resumed
        within an epoch starts with the rest of it, and a stop signal ends both loops. A loop that
        leaves an epoch early does not skip the rest: the next epoch object starts there."""
        while True:
            try:
                first = next(self)
            except StopIteration:
                return
            self._pending = first
            yield Epoch(self, first.epoch)



    def loss(self, value):
        """Tells sluice this step's training loss (or, inside a validation() pass, the mean loss of
        the validation batch just handed out). Only its value leaves the script: a non-finite loss
        on any model rank stops every model rank at the same step, as `sluice train` stops its own
        (the next batch raises sluice.Error naming the step and the ranks; checkpoint nothing from
        that state), and the validation losses are averaged over the model ranks into this rank's
        ranks/rank-N.json. Accepts a float or a one-element tensor (it calls .item(): on a GPU that
        waits for the step, which the next batch's slot release does anyway)."""
        self._handle.report_loss(float(value.item() if hasattr(value, "item") else value))

    @property
    def stopped_at(self):
        """None, or the global step at which a stop signal (SIGTERM/SIGUSR1, e.g. Slurm preemption)
        ended the iteration on every model rank: the first batch not handed out, i.e. the
        resume_step to pass to sluice.Feed() when the job is started again. Checkpoint, then close()."""
        return self._handle.stopped_at

    @property
    def stop_signal(self):
        """"SIGTERM" or "SIGUSR1" when this process received one, else None."""
        return self._handle.stop_signal

    def validation_due(self, batch):
        """True when train.validation_every asks for a validation pass after `batch` (the C++ model
        ranks validate at the same points). A finished run validates once more after the loop."""
        return self._handle.validation_due(batch.global_step + 1)

    def validation(self):
        """This rank's share of the validation split (every world_size-th sample, from `rank`), in
        batches of train.batch_size read from the cache on this rank and normalised like training
        batches (never masked); epoch and step are -1. The tensors are on the CPU and valid until
        the next validation batch; the current training batch stays valid. The pass is one
        `validation` span in the timeline and ends this step's compute span. Sum the losses over
        the model ranks (torch.distributed) for the split's mean."""
        self._handle.start_validation()
        batch = None
        try:
            while True:
                if batch is not None:
                    batch._let_go()
                handle = self._handle.next_validation()
                if handle is None:
                    return
                batch = Batch(handle, self.corpus_starts, self._handle.labels)
                yield batch
        finally:
            self._handle.end_validation()

    @contextlib.contextmanager
    def span(self, stage):
        """Marks a part of the step in this rank's timeline: forward, backward, optimizer,
        allreduce_exposed, sync, validation or checkpoint. The step's time outside marked spans
        counts as forward (all of it without spans): mark a collective the script makes itself
        (an all_reduce of the loss) as sync, or its wait for other ranks looks like its own work.
        With watch_ddp(), a backward span is split where DDP's last gradient bucket was ready."""
        start = now_ns()
        try:
            yield
        finally:
            end, ready = now_ns(), self._bucket_ready_ns
            if stage == "backward" and ready is not None and start <= ready <= end:
                self._handle.mark("backward", start, ready)
                self._handle.mark("allreduce_exposed", ready, end)
            else:
                self._handle.mark(stage, start, end)

    def close(self):
        """Ends this rank's part: gives the last slot back, waits for the other ranks, writes this
        rank's timeline (rank 0 writes the report). Returns sluice train's exit code: 0, or 4
        after a stop signal (stopped_at)."""
        if self._batch is not None and self.gpu >= 0:
            _synchronize(self.gpu)
        if self._batch is not None:
            self._batch._let_go()
        self._batch = self._pending = None
        return self._handle.close()

    def __enter__(self):
        return self

    def __exit__(self, kind, value, traceback):
        if kind is None:
            self.close()
        return False


class Epoch:
    """One epoch of the plan as Feed.epochs() hands it out: iterate it for its batches."""

    def __init__(self, feed, number):
        self.feed, self.number = feed, number

    def __iter__(self):
        return self

    def __next__(self):
        batch = next(self.feed)  # raises StopIteration at the feed's end
        if batch.epoch != self.number:
            self.feed._pending = batch  # the next epoch's first
            raise StopIteration
        return batch
