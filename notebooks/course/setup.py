"""One setup for the whole course: the tokenizer, shards and held-out plays that `make run` trains on.

Hand-written tooling of the course, not part of the installed package. Every lesson from 01 to 06 works on
the same data, so that each loss can be compared with the last: the embedded Shakespeare corpus, the `cpu`
preset's 4,096-id byte-level BPE tokenizer, and the shards with 2 of the 42 plays held out (*Cymbeline* and
*Julius Caesar*; the split is the seeded permutation of notebook 02). They live where `make run` puts them
(`data/tokenizers/shakespeare-4096`, `data/shards/shakespeare-4096`) and are made on first use (a few
seconds), then reused by every notebook and by `make run`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

CORPUS = "shakespeare"
VOCAB_SIZE = 4096  # the `cpu` preset's (tests/test_course_training.py checks that they agree)


@dataclass
class CourseData:
    "The course's data: the tokenizer, the shard folder and its two splits (memory-mapped tokens)."

    tokenizer: object  # gptlib.tokenizer.Tokenizer
    tokenizer_dir: Path
    shards: Path
    train: object  # gptlib.data.TokenSplit
    val: object


def course_data(progress: bool = False) -> CourseData:
    "The course's tokenizer and shards, made on first use exactly as `make run` makes them, then reused."
    from gptlib.corpus import data_dir
    from gptlib.data import open_split
    from gptlib.pipeline import prepare_data

    data = prepare_data(CORPUS, VOCAB_SIZE, data_dir(), log=None, progress=progress)
    train, val = open_split(data.shards, "train"), open_split(data.shards, "val")
    return CourseData(data.tokenizer, data.tokenizer_dir, data.shards, train, val)
