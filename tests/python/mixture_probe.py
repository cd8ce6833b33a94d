"""A Python model rank on a mixture of caches (train.mixture) for test_python_ranks.py: records the
feed's caches and where their indices begin, its languages and speakers, and, where torch is
installed, every batch's indices with batch.corpus, batch.language and batch.speaker. One
validation pass after global step 2 reports each batch's loss as 1 + its corpus (1.0 for every
batch without torch), so the per-corpus means are known, and records each validation batch's
corpus, language and size, so the test can work out the per-language means.

    mixture_probe.py OUT
"""
import json
import os
import sys

import sluice

try:
    import torch  # noqa: F401  (batch.corpus is a torch tensor, as the other attributes are)
    have_torch = True
except ImportError:
    have_torch = False

record = {"torch": have_torch, "batches": [], "validation_corpora": [], "validation_batches": []}
try:
    feed = sluice.Feed()
    record.update(rank=feed.rank, corpora=feed.corpora, corpus_starts=list(feed.corpus_starts),
                  languages=feed.languages, speakers=feed.speakers)
    for batch in feed:
        if have_torch:
            record["batches"].append({"indices": batch.indices.tolist(), "corpus": batch.corpus.tolist(),
                                      "language": batch.language.tolist(), "speaker": batch.speaker.tolist()})
        feed.loss(1.0)
        if batch.global_step == 2:
            for vbatch in feed.validation():
                corpus = vbatch.corpus.tolist() if have_torch else [0]
                record["validation_corpora"].append(corpus)
                if have_torch:
                    record["validation_batches"].append({"corpus": corpus, "language": vbatch.language.tolist()})
                feed.loss(1.0 + corpus[0])
    record["exit"] = feed.close()
except sluice.Error as error:
    record["error"] = {"class": type(error).__name__, "message": str(error)}
    print(f"ERROR {type(error).__name__}: {error}", flush=True)
finally:
    with open(sys.argv[1].format(rank=record.get("rank", os.environ.get("OMPI_COMM_WORLD_RANK", "0"))), "w") as out:
        json.dump(record, out)
