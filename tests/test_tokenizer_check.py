"""The tokenizer and the data must agree (issue 32): a dataset folder we build or download records
its tokenizer (tokenized_with.json: name and sha256), and train_gpt.py refuses another one in one
line naming both; without a record, the first validation documents must decode and encode back
to their own ids, which catches data tokenized with another tokenizer whose ids fit (the issue's
512-piece data under the default 1024-piece tokenizer) and accepts legitimate data."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import sentencepiece as spm

import train_gpt as tg
from conftest import run_train
from data.build_local_dataset import build


@pytest.fixture(scope="module")
def small_vocab_dataset(tmp_path_factory):
    """The same kind of text tokenized by a 512-piece tokenizer: its ids fit VOCAB_SIZE=1024."""
    root = tmp_path_factory.mktemp("sp512")
    return build(
        root, vocab_size=512, max_text_bytes=300_000, shard_tokens=100_000, progress=False, log=None
    )


def val_split(dataset) -> np.ndarray:
    return np.concatenate(
        [tg.load_data_shard(p) for p in sorted(dataset.dataset_dir.glob("*val*"))]
    )


def unrecorded(dataset, tmp_path: Path) -> Path:
    """A copy of the dataset's folder without its record: what the start-up check sees."""
    folder = tmp_path / "unrecorded"
    shutil.copytree(dataset.dataset_dir, folder)
    (folder / tg.TOKENIZED_WITH).unlink()
    return folder


def test_the_builder_records_its_tokenizer(tiny_dataset):
    record = json.loads((tiny_dataset.dataset_dir / tg.TOKENIZED_WITH).read_text())
    info = json.loads((tiny_dataset.dataset_dir / "build_info.json").read_text())
    assert record == {"tokenizer": "stdlib_1024_bpe", "sha256": info["tokenizer"]["sha256"]}


def test_a_recorded_dataset_refuses_another_tokenizer_in_one_line(
    tiny_dataset, small_vocab_dataset, tmp_path
):
    # the case: 512-piece data, the 1024-piece tokenizer; the ids fit
    data = SimpleNamespace(
        dataset_dir=small_vocab_dataset.dataset_dir,
        tokenizer_path=tiny_dataset.tokenizer_path,
        vocab_size=1024,
    )
    run = run_train(tmp_path / "run", data, nproc=0, timeout=120)
    assert run.returncode == 2, run.why()
    ours = tg.hashlib.sha256(tiny_dataset.tokenizer_path.read_bytes()).hexdigest()[:12]
    theirs = json.loads((small_vocab_dataset.dataset_dir / tg.TOKENIZED_WITH).read_text())
    assert run.stderr.splitlines() == [
        f"error: TOKENIZER_PATH={tiny_dataset.tokenizer_path} (sha256 {ours}) is not the "
        f"tokenizer DATA_PATH={small_vocab_dataset.dataset_dir} was tokenized with: "
        f"stdlib_512_bpe (sha256 {theirs['sha256'][:12]}, tokenized_with.json)"
    ]
    assert "step:" not in run.stdout
    (log,) = (tmp_path / "run" / "logs").glob("*.txt")  # the settings line named it: it says why
    assert log.read_text().splitlines()[-1] == run.stderr.splitlines()[0]


def test_without_a_record_the_round_trip_catches_the_other_tokenizer(
    tiny_dataset, small_vocab_dataset, tmp_path
):
    folder = unrecorded(small_vocab_dataset, tmp_path)
    cfg = SimpleNamespace(data_path=str(folder), tokenizer_path=str(tiny_dataset.tokenizer_path))
    sp = spm.SentencePieceProcessor(model_file=str(tiny_dataset.tokenizer_path))
    with pytest.raises(tg.DataError, match="do not decode and encode back to their ids"):
        tg.check_tokenizer(cfg, sp, val_split(small_vocab_dataset))
    own = spm.SentencePieceProcessor(model_file=str(small_vocab_dataset.tokenizer_path))
    tg.check_tokenizer(cfg, own, val_split(small_vocab_dataset))  # its own tokenizer: accepted


def test_without_a_record_legitimate_data_is_accepted(tiny_dataset, tmp_path):
    """The built data, and documents of byte-fallback pieces, NFKC-normalised characters and
    runs of spaces: all decode and encode back to their ids."""
    folder = unrecorded(tiny_dataset, tmp_path)
    cfg = SimpleNamespace(data_path=str(folder), tokenizer_path=str(tiny_dataset.tokenizer_path))
    sp = spm.SentencePieceProcessor(model_file=str(tiny_dataset.tokenizer_path))
    tg.check_tokenizer(cfg, sp, val_split(tiny_dataset))
    texts = ["naïve café ☃ 日本語 ½ ﬁ", "two  spaces\tand\nlines", "Ω≈ç√∫˜µ≤≥÷ — “quotes”"]
    ids = [sp.encode(t) for t in texts]
    assert any(sp.is_byte(i) for doc in ids for i in doc)  # byte fallback is exercised
    split = np.array([x for doc in ids for x in [tg.BOS_ID, *doc]] + [tg.BOS_ID], np.uint16)
    tg.check_tokenizer(cfg, sp, split)


def test_an_unreadable_record_is_one_error(tiny_dataset, tmp_path):
    folder = unrecorded(tiny_dataset, tmp_path)
    (folder / tg.TOKENIZED_WITH).write_text("{not json")
    cfg = SimpleNamespace(data_path=str(folder), tokenizer_path=str(tiny_dataset.tokenizer_path))
    with pytest.raises(tg.DataError, match=r"tokenized_with\.json: unreadable"):
        tg.check_tokenizer(cfg, None, val_split(tiny_dataset))
