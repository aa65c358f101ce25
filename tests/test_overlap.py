"""data/check_overlap.py: validation documents found in the training shards, wherever they sit
(inside a shard, across a shard boundary, at a split's start), and nothing else; its record,
which train_gpt.py copies into its log only while it describes the run's shards."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from data import check_overlap as co
from data.shard_io import shard_name, write_shard
from train_gpt import BOS_ID, OVERLAP_RECORD, Hyperparameters, overlap_line

REPO = Path(__file__).resolve().parents[1]


def documents(rng, n: int, low: int = 5, high: int = 200) -> list[np.ndarray]:
    """n random documents, each BOS then tokens 2..1023 (never a BOS inside)."""
    return [
        np.concatenate(([BOS_ID], rng.integers(2, 1024, rng.integers(low, high)))) for _ in range(n)
    ]


def write_split(folder: Path, split: str, docs: list, cuts: list[int]) -> list[Path]:
    """The documents as one stream, cut into shards at the token positions `cuts`."""
    stream = np.concatenate(docs)
    bounds = [0, *cuts, stream.size]
    return [
        write_shard(folder / shard_name(split, i), stream[a:b])
        for i, (a, b) in enumerate(itertools.pairwise(bounds))
    ]


@pytest.fixture
def dataset(tmp_path):
    """40 validation documents and 300 training ones, none shared, in 3 train shards."""
    rng = np.random.default_rng(0)
    val, train = documents(rng, 40), documents(rng, 300)
    write_split(tmp_path, "val", val, [])
    size = sum(d.size for d in train)
    write_split(tmp_path, "train", train, [size // 3, 2 * size // 3])
    return SimpleNamespace(path=tmp_path, val=val, train=train)


def test_distinct_documents_overlap_nowhere(dataset):
    report = co.check_overlap(dataset.path, progress=False)
    assert (report.val_documents, report.train_documents) == (40, 300)
    assert (report.overlapping, report.occurrences, report.examples) == (0, 0, [])
    assert len(report.seconds_per_shard) == 3


def test_every_copied_validation_document_is_found_with_its_place(dataset):
    """Val documents 3, 7 and 11 copied into training: one inside a shard, one across the cut
    between shards 0 and 1, one twice; each found where it is, nothing else."""
    train, val = list(dataset.train), dataset.val
    train.insert(10, val[3])
    train.insert(200, val[11])
    train.insert(250, val[11])
    stream_before = sum(d.size for d in train[:100])
    train.insert(100, val[7])
    cut = stream_before + 3  # inside val[7]: it runs on into shard 1
    for old in dataset.path.glob("fineweb_train_*.bin"):
        old.unlink()
    files = write_split(dataset.path, "train", train, [cut, cut + 5000])
    report = co.check_overlap(dataset.path, progress=False)
    assert (report.overlapping, report.occurrences) == (3, 4)
    found = {(m["shard"], m["val_document"]) for m in report.examples}
    assert (files[0].name, 7) in found and (files[0].name, 3) in found
    for m in report.examples:  # the offset is the document's BOS, its tokens the val ones
        tokens = np.asarray(co.mapped(dataset.path / m["shard"]))
        assert tokens[m["offset"]] == BOS_ID
        doc = val[m["val_document"]][1:]
        if m["val_document"] != 7:
            assert np.array_equal(tokens[m["offset"] + 1 : m["offset"] + 1 + doc.size], doc)
        assert m["tokens"] == doc.size


def test_a_prefix_of_a_validation_document_is_no_match(dataset):
    """Same length/first/last key is not enough: the tokens must be equal."""
    train = list(dataset.train)
    twin = dataset.val[5].copy()
    twin[len(twin) // 2] = 1000 if twin[len(twin) // 2] != 1000 else 1001  # one token differs
    train.insert(50, twin)
    train.insert(60, dataset.val[6][:-1])  # one token short
    for old in dataset.path.glob("fineweb_train_*.bin"):
        old.unlink()
    write_split(dataset.path, "train", train, [])
    assert co.check_overlap(dataset.path, progress=False).overlapping == 0


def test_the_tokens_before_the_first_bos_are_a_document(tmp_path):
    """A split that starts mid-document: its head is a document of its own (val and train)."""
    head = np.arange(2, 40)
    write_shard(tmp_path / shard_name("val", 0), np.concatenate((head, [BOS_ID, 5, 6, 7])))
    write_shard(tmp_path / shard_name("train", 0), np.concatenate((head, [BOS_ID, 8, 9])))
    report = co.check_overlap(tmp_path, progress=False)
    assert (report.val_documents, report.train_documents, report.overlapping) == (2, 2, 1)
    assert report.examples[0]["offset"] == 0


def test_min_tokens_skips_short_documents(tmp_path):
    """A 3-token document in both splits: found by default, skipped by --min-tokens 4."""
    long = np.arange(2, 30)
    write_shard(tmp_path / shard_name("val", 0), [BOS_ID, *long, BOS_ID, 5, 6, 7])
    write_shard(tmp_path / shard_name("train", 0), [BOS_ID, 9, 9, 9, BOS_ID, 5, 6, 7])
    assert co.check_overlap(tmp_path, progress=False).overlapping == 1
    report = co.check_overlap(tmp_path, min_tokens=4, progress=False)
    assert (report.val_documents, report.train_documents, report.overlapping) == (1, 0, 0)


def test_the_record_feeds_the_run_log_only_while_it_describes_the_shards(dataset):
    cfg = Hyperparameters(data_path=str(dataset.path))
    assert overlap_line(cfg) == "data_overlap: not checked (run data/check_overlap.py DATA_PATH)"
    report = co.check_overlap(dataset.path, progress=False)
    path = co.write_record(report)
    assert path.name == OVERLAP_RECORD == co.RECORD
    assert overlap_line(cfg).startswith(
        "data_overlap: 0 of 40 validation documents in the training shards (checked "
    )
    write_shard(dataset.path / shard_name("train", 3), [BOS_ID, 5, 6])  # a shard more
    assert "not checked for these shards" in overlap_line(cfg)
    path.write_text("{not json")
    assert "unreadable" in overlap_line(cfg)


def test_a_shard_overwritten_in_place_to_the_same_size_is_checked_again(dataset):
    """The stale-record case: a training document replaced by a validation document of the same
    length, the shard's size unchanged; the record no longer describes it, and a new check
    finds it."""
    cfg = Hyperparameters(data_path=str(dataset.path))
    co.write_record(co.check_overlap(dataset.path, progress=False))
    assert "not checked" not in overlap_line(cfg)
    path = dataset.path / shard_name("train", 1)
    tokens = np.asarray(co.mapped(path)).copy()
    starts = np.flatnonzero(tokens == BOS_ID)
    a, b = int(starts[1]), int(starts[2])  # a whole document inside the shard
    leaked = next(d for d in dataset.val if d.size == b - a)
    size = path.stat().st_size
    tokens[a:b] = leaked
    write_shard(path, tokens)
    assert path.stat().st_size == size
    assert "not checked for these shards" in overlap_line(cfg)
    report = co.check_overlap(dataset.path, progress=False)
    assert report.overlapping == 1 and "(1 occurrence in 3 train shards" in report.line()


def test_write_clean_copies_the_dataset_without_the_validation_documents(dataset, tmp_path):
    """Two validation documents leaked into training, one of them across a shard boundary:
    the clean copy has neither, every training document in order, the validation shards as
    they were, and a record of 0 the run reads."""
    docs = [*dataset.train[:100], dataset.val[4], *dataset.train[100:200], dataset.val[9]]
    docs += dataset.train[200:]
    across = sum(d.size for d in docs[:100]) + 3  # a cut 3 tokens into the first leaked one
    write_split(dataset.path, "train", docs, [across, across + 5000])
    out = tmp_path / "clean"
    result = run_tool(dataset.path, "--quiet", "--write-clean", out)
    assert result.returncode == 0, result.stderr
    assert "2 documents (" in result.stdout and "data_overlap: 0 of 40" in result.stdout
    train = sorted(out.glob("fineweb_train_*.bin"))
    assert [p.name for p in train] == [shard_name("train", i) for i in range(3)]
    clean = np.concatenate([np.asarray(co.mapped(p)) for p in train])
    assert np.array_equal(clean, np.concatenate(dataset.train))
    val = shard_name("val", 0)
    assert (out / val).read_bytes() == (dataset.path / val).read_bytes()
    assert overlap_line(Hyperparameters(data_path=str(out))).startswith(
        "data_overlap: 0 of 40 validation documents"
    )
    again = run_tool(dataset.path, "--quiet", "--write-clean", out)
    assert again.returncode == 2 and "expected a new or empty folder" in again.stderr


def test_the_preflight_and_check_judge_overlap_by_one_rule():
    from records.golf.rules import OVERLAP_SHARE, overlap_status

    assert OVERLAP_SHARE == 0.001
    assert [overlap_status(n, 50_000) for n in (0, 1, 50, 51)] == ["PASS", "WARN", "WARN", "FAIL"]


def test_the_tool_and_train_gpt_read_the_same_shards():
    cfg = Hyperparameters(data_path="D")
    assert cfg.train_files == str(Path("D") / co.TRAIN_GLOB)
    assert cfg.val_files == str(Path("D") / co.VAL_GLOB)


def run_tool(*args) -> subprocess.CompletedProcess:
    tool = REPO / "data" / "check_overlap.py"
    return subprocess.run(
        [sys.executable, str(tool), *map(str, args)], capture_output=True, text=True, timeout=120
    )


def test_cli_exit_codes_examples_and_record(dataset):
    clean = run_tool(dataset.path, "--quiet")
    assert clean.returncode == 0, clean.stderr
    assert "data_overlap: 0 of 40" in clean.stdout and "per train shard" in clean.stdout
    assert json.loads((dataset.path / co.RECORD).read_text())["overlapping"] == 0
    write_shard(dataset.path / shard_name("train", 3), np.concatenate(dataset.val[:2]))
    leaked = run_tool(dataset.path, "--quiet", "--no-record", "--json")
    assert leaked.returncode == 1, leaked.stderr
    assert json.loads(leaked.stdout)["overlapping"] == 2
    assert json.loads((dataset.path / co.RECORD).read_text())["overlapping"] == 0  # untouched


def test_cli_help_and_bad_input(tmp_path):
    assert run_tool("--help").returncode == 0
    missing = run_tool(tmp_path / "nowhere")
    assert missing.returncode == 2 and "no such folder" in missing.stderr
    (tmp_path / shard_name("val", 0)).write_bytes(b"\0" * 100)
    (tmp_path / shard_name("train", 0)).write_bytes(b"\0" * 100)
    bad = run_tool(tmp_path)
    assert bad.returncode == 2 and shard_name("val", 0) in bad.stderr


def test_examples_decode_with_the_tokenizer(tiny_dataset, tmp_path):
    """On the built dataset: its validation documents copied into a train shard are found, and
    each example's first tokens decode to the document's text."""
    import shutil

    folder = tmp_path / "d"
    shutil.copytree(tiny_dataset.dataset_dir, folder)
    val = np.asarray(co.mapped(folder / shard_name("val", 0)))
    write_shard(folder / "fineweb_train_000099.bin", val)
    report = co.check_overlap(folder, progress=False, tokenizer=str(tiny_dataset.tokenizer_path))
    assert report.overlapping == report.val_documents == tiny_dataset.num_val_docs
    assert all(m["text"].strip() for m in report.examples)


def test_check_reports_the_logs_overlap_line_as_advice():
    """`check`: a log's `data_overlap:` line PASSes at 0, WARNs with a fix at a count or `not
    checked`; a log without the line (another script's) is not judged."""
    from records.golf.check import check_data_overlap
    from records.golf.logs import parse_log
    from records.golf.rules import severity

    def findings(*lines: str) -> list:
        logs = [
            parse_log(f"seed:1\n{line}\n", f"train_seed{i}.log") for i, line in enumerate(lines)
        ]
        return [f.line() for f in check_data_overlap(SimpleNamespace(logs=logs))]

    clean = "data_overlap: 0 of 50000 validation documents in the training shards (checked x)"
    leaked = "data_overlap: 15 of 50000 validation documents in the training shards (checked x)"
    many = "data_overlap: 51 of 50000 validation documents in the training shards (checked x)"
    assert parse_log(f"{clean}\n").data_overlap == clean.removeprefix("data_overlap: ")
    assert findings(clean, clean) == [f"PASS data_overlap: 2 log(s): {clean[14:]}"]
    fix = "fix: train on shards without the validation documents (docs/data.md: clean shards)"
    assert findings(clean, leaked) == [f"WARN data_overlap: train_seed1.log: {leaked[14:]}; {fix}"]
    assert findings(many) == [f"FAIL val_in_train: train_seed0.log: {many[14:]}; {fix}"]
    unchecked = findings(overlap_line(Hyperparameters(data_path="/nowhere")))
    assert unchecked[0].startswith("WARN data_overlap: train_seed0.log: the train/validation ")
    assert unchecked[0].endswith("fix: run data/check_overlap.py DATA_PATH before the runs")
    assert findings("step:1/2 train_loss:3.0") == [] and severity("data_overlap") == "WARN"
    older = findings("settings: SEED=1 (all of them: logs/x.txt)")  # our script, before the line
    assert older == [
        "WARN data_overlap: train_seed0.log has no data_overlap line (a train_gpt.py from before "
        "it); fix: run data/check_overlap.py on the run's DATA_PATH"
    ]


def test_a_run_logs_its_data_overlap_line(tiny_run):
    """The tiny run's dataset has no record: the run says so, in its log too."""
    from records.golf.logs import read_log

    line = "data_overlap: not checked (run data/check_overlap.py DATA_PATH)"
    assert tiny_run.lines("data_overlap:") == [line]
    assert read_log(tiny_run.log_path).data_overlap == line.removeprefix("data_overlap: ")
