"""The data tools: shard writer, offline stdlib dataset builder, FineWeb downloader.

CPU only, no network, nothing from outside the repo. The tiny dataset is built once per module.
The downloader is exercised against a temp directory laid out like the hub repo (--mirror),
and its hub path only with HF_HUB_OFFLINE=1, which must fail fast without touching the network.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import sentencepiece as spm

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import train_gpt  # noqa: E402
from data import build_local_dataset as builder  # noqa: E402
from data import download_fineweb as downloader  # noqa: E402
from data.shard_io import ShardError, check_shard_header, shard_name, write_shard  # noqa: E402

TINY = dict(max_text_bytes=1_000_000, shard_tokens=100_000, progress=False, log=None)


def shard_files(directory: Path, split: str) -> list[Path]:
    return sorted(directory.glob(f"fineweb_{split}_*.bin"))


def split_tokens(directory: Path, split: str, vocab_size: int | None = None) -> np.ndarray:
    return np.concatenate(
        [train_gpt.load_data_shard(p, vocab_size) for p in shard_files(directory, split)]
    )


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


# ---------------------------------------------------------------------------------------------
# shard_io.write_shard
# ---------------------------------------------------------------------------------------------
def test_write_shard_header_is_magic_version_count_then_zeros(tmp_path):
    path = write_shard(tmp_path / shard_name("train", 0), range(10))
    header = np.fromfile(path, dtype="<i4", count=256)
    assert header[:3].tolist() == [20240520, 1, 10]
    assert not header[3:].any()


def test_write_shard_file_is_header_plus_little_endian_uint16_tokens(tmp_path):
    path = write_shard(tmp_path / "s.bin", [1, 2, 65535])
    raw = path.read_bytes()
    assert len(raw) == 1024 + 2 * 3
    assert raw[1024:] == bytes([1, 0, 2, 0, 255, 255])


def test_write_shard_round_trips_through_the_trainer_loader(tmp_path):
    tokens = np.arange(5000) % 1024
    path = write_shard(tmp_path / "s.bin", tokens)
    assert train_gpt.read_shard_header(path) == 5000
    np.testing.assert_array_equal(train_gpt.load_data_shard(path, vocab_size=1024), tokens)


@pytest.mark.parametrize("bad", [[-1], [65536], [0.5]])
def test_write_shard_rejects_tokens_that_do_not_fit_uint16(tmp_path, bad):
    with pytest.raises(ValueError):
        write_shard(tmp_path / "s.bin", bad)
    assert list(tmp_path.iterdir()) == []  # and leaves nothing behind


def test_write_shard_replaces_atomically_leaving_no_temp_files(tmp_path):
    write_shard(tmp_path / "s.bin", range(100))
    write_shard(tmp_path / "s.bin", range(7))
    assert [p.name for p in tmp_path.iterdir()] == ["s.bin"]
    assert train_gpt.read_shard_header(tmp_path / "s.bin") == 7


def test_shard_names_follow_the_challenge_pattern():
    assert shard_name("train", 3) == "fineweb_train_000003.bin"
    assert shard_name("val", 0) == "fineweb_val_000000.bin"


def with_int(raw: bytes, offset: int, value: int) -> bytes:
    return raw[:offset] + value.to_bytes(4, "little", signed=True) + raw[offset + 4 :]


# How a good 100-token shard is damaged, and the word shard_io's message must contain (None:
# still a valid shard).
SHARD_DAMAGE = {
    "good": (lambda raw: raw, None),
    "bad_magic": (lambda raw: with_int(raw, 0, 12345), "bad magic"),
    "bad_version": (lambda raw: with_int(raw, 4, 2), "version"),
    "truncated_header": (lambda raw: raw[:1000], "truncated header"),
    "empty_file": (lambda raw: b"", "truncated header"),
    "one_token_short": (lambda raw: raw[:-2], "size mismatch"),
    "one_token_long": (lambda raw: raw + b"\0\0", "size mismatch"),
    "negative_count": (lambda raw: with_int(raw, 8, -1), "size mismatch"),
    "count_too_big": (lambda raw: with_int(raw, 8, 101), "size mismatch"),
}


@pytest.mark.parametrize("case", SHARD_DAMAGE)
def test_shard_io_header_check_agrees_with_the_trainer(tmp_path, case):
    """check_shard_header (stdlib only, for the downloader) accepts and rejects exactly what
    train_gpt.read_shard_header does, and names the file and the fault."""
    damage, expected_fault = SHARD_DAMAGE[case]
    raw = write_shard(tmp_path / "good.bin", range(100)).read_bytes()
    path = tmp_path / "s.bin"
    path.write_bytes(damage(raw))
    if expected_fault is None:
        assert check_shard_header(path) == train_gpt.read_shard_header(path) == 100
        return
    with pytest.raises(train_gpt.DataError):
        train_gpt.read_shard_header(path)
    with pytest.raises(ShardError) as caught:
        check_shard_header(path)
    assert str(path) in str(caught.value) and expected_fault in str(caught.value)


def test_shard_io_header_check_names_a_missing_file(tmp_path):
    path = tmp_path / "missing.bin"
    with pytest.raises(train_gpt.DataError):
        train_gpt.read_shard_header(path)
    with pytest.raises(ShardError, match=r"missing\.bin: cannot read shard"):
        check_shard_header(path)


def test_shard_io_header_check_returns_the_count_of_an_empty_shard(tmp_path):
    path = write_shard(tmp_path / "s.bin", [])
    assert check_shard_header(path) == train_gpt.read_shard_header(path) == 0


# ---------------------------------------------------------------------------------------------
# build_local_dataset: one tiny build shared by the module
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return builder.build(tmp_path_factory.mktemp("tiny"), **TINY)


@pytest.fixture(scope="module")
def tokenizer(tiny):
    return spm.SentencePieceProcessor(model_file=str(tiny.tokenizer_path))


def test_builder_writes_challenge_layout(tiny):
    assert tiny.dataset_dir.name == "stdlib_sp1024"
    assert tiny.dataset_dir.parent.name == "datasets"
    assert tiny.tokenizer_path.name == "stdlib_1024_bpe.model"
    assert tiny.tokenizer_path.parent == tiny.dataset_dir.parent.parent / "tokenizers"


def test_builder_publishes_a_folder_others_can_read(tiny):
    """Shards are 0644 to be shared: their folder is not mkdtemp's 0700."""
    assert tiny.dataset_dir.stat().st_mode & 0o777 == 0o755


def test_builder_shards_pass_the_trainer_header_and_size_check(tiny):
    shards = shard_files(tiny.dataset_dir, "val") + shard_files(tiny.dataset_dir, "train")
    assert len(shards) == tiny.num_val_shards + tiny.num_train_shards
    counts = [train_gpt.read_shard_header(p) for p in shards]
    assert all(p.stat().st_size == 1024 + 2 * n for p, n in zip(shards, counts, strict=True))
    assert sum(counts) == tiny.val_tokens + tiny.train_tokens


def test_builder_tiny_dataset_is_big_enough_for_smoke_runs(tiny):
    assert tiny.val_tokens >= 20_000
    assert tiny.train_tokens >= 100_000
    assert tiny.num_train_shards >= 2  # so loaders cross a shard boundary


def test_builder_token_ids_are_below_the_vocab_size(tiny):
    for split in ("val", "train"):
        assert split_tokens(tiny.dataset_dir, split, vocab_size=1024).max() < 1024


def test_builder_documents_are_bos_then_text_without_eos(tiny):
    val, train = split_tokens(tiny.dataset_dir, "val"), split_tokens(tiny.dataset_dir, "train")
    assert val[0] == 1 and train[0] == 1  # each split starts at a document
    assert (val == 1).sum() == tiny.num_val_docs
    assert (val == 1).sum() + (train == 1).sum() == tiny.num_docs
    assert not np.isin(np.concatenate([val, train]), [0, 2, 3]).any()  # no pad, eos or unk


def test_builder_val_split_is_the_first_documents(tiny):
    assert 1 <= tiny.num_val_docs < tiny.num_docs
    assert tiny.val_tokens > 0


def test_builder_text_is_english_prose(tiny, tokenizer):
    words = tokenizer.decode(split_tokens(tiny.dataset_dir, "val").tolist()).split()
    assert words.count("the") > len(words) / 100


def test_tokenizer_has_1024_pieces_and_challenge_special_ids(tokenizer):
    assert tokenizer.get_piece_size() == 1024
    assert (tokenizer.pad_id(), tokenizer.bos_id(), tokenizer.eos_id(), tokenizer.unk_id()) == (
        0,
        1,
        2,
        3,
    )


def test_tokenizer_falls_back_to_bytes_not_unk(tokenizer):
    assert sum(tokenizer.is_byte(i) for i in range(tokenizer.get_piece_size())) == 256
    ids = tokenizer.encode("☃")
    assert all(tokenizer.is_byte(i) for i in ids) and len(ids) == 3


def test_tokenizer_adds_no_dummy_prefix(tokenizer):
    assert not tokenizer.encode("hello", out_type=str)[0].startswith("▁")


def test_tokenizer_splits_digits(tokenizer):
    assert [p for p in tokenizer.encode("2024", out_type=str) if p != "▁"] == ["2", "0", "2", "4"]


def test_tokenizer_normalizes_with_nfkc(tokenizer):
    assert tokenizer.decode(tokenizer.encode("\ufb01le")) == "file"  # the "fi" ligature


def test_tokenizer_has_a_standalone_space_piece(tokenizer):
    # BPB counts the leading space through pieces starting with "▁"; without a bare "▁"
    # piece a space before a rare token would be miscounted.
    assert tokenizer.piece_to_id("▁") != tokenizer.unk_id()


def test_builder_same_inputs_give_identical_bytes(tiny, tmp_path):
    again = builder.build(tmp_path, **TINY)
    first_root = tiny.dataset_dir.parent.parent
    assert tree_bytes(tmp_path) == tree_bytes(first_root)
    assert again.train_tokens == tiny.train_tokens


def test_builder_rerun_on_valid_outputs_does_nothing(tmp_path):
    small = dict(TINY, max_text_bytes=200_000)
    builder.build(tmp_path, **small)
    before = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*")}
    messages = []
    result = builder.build(tmp_path, **dict(small, log=messages.append))
    assert result.built is False
    assert {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*")} == before
    assert any("already built" in m for m in messages)


def test_builder_rerun_with_force_rebuilds(tmp_path):
    small = dict(TINY, max_text_bytes=200_000)
    first = builder.build(tmp_path, **small)
    shard = shard_files(first.dataset_dir, "train")[0]
    before = shard.stat().st_ino  # intact: only --force writes it again
    assert builder.build(tmp_path, force=True, **small).built is True
    assert shard.stat().st_ino != before


def test_builder_rebuilds_a_damaged_dataset(tmp_path):
    small = dict(TINY, max_text_bytes=200_000)
    first = builder.build(tmp_path, **small)
    shard = shard_files(first.dataset_dir, "train")[0]
    shard.write_bytes(shard.read_bytes()[:-2])
    assert builder.build(tmp_path, **small).built is True
    assert train_gpt.read_shard_header(shard) * 2 + 1024 == shard.stat().st_size


def test_builder_rebuilds_when_options_change(tmp_path):
    small = dict(TINY, max_text_bytes=200_000)
    first = builder.build(tmp_path, **small)
    second = builder.build(tmp_path, **dict(small, shard_tokens=10_000))
    assert second.built is True and second.num_train_shards > first.num_train_shards
    assert len(shard_files(second.dataset_dir, "train")) == second.num_train_shards


def test_builder_refuses_to_replace_a_directory_it_did_not_make(tmp_path):
    foreign = tmp_path / "datasets" / "stdlib_sp1024"
    foreign.mkdir(parents=True)
    (foreign / "fineweb_train_000000.bin").write_bytes(b"precious")
    with pytest.raises(builder.BuildError, match="not made by this builder"):
        builder.build(tmp_path, **TINY)
    assert (foreign / "fineweb_train_000000.bin").read_bytes() == b"precious"


def test_builder_leaves_no_temp_files(tiny):
    root = tiny.dataset_dir.parent.parent
    assert not [p for p in root.rglob("*") if p.name.startswith(".")]


def test_builder_cli_reports_bad_options_with_exit_code_2(tmp_path, capsys):
    assert builder.main(["--out-root", str(tmp_path), "--vocab-size", "100"]) == 2
    assert "vocab_size" in capsys.readouterr().err


def test_builder_cli_prints_a_summary(tmp_path, capsys):
    argv = ["--out-root", str(tmp_path), "--max-text-bytes", "100000", "--no-progress"]
    assert builder.main(argv) == 0
    out = capsys.readouterr().out
    assert "train:" in out and "val:" in out and "stdlib_1024_bpe.model" in out
    # the command to train on it: the quick start's small CPU settings, not the 17M-param default
    command = out[out.index("DATA_PATH=") : out.index("data_fingerprint:")]
    command = command.replace("\\\n", " ").split()
    assert command[3:-4] == builder.quickstart_settings() and "NUM_LAYERS=4" in command
    assert " ".join(command[-4:]) == builder.TRAIN_LAUNCH


def test_builder_cli_prints_its_summary_once_then_the_fingerprint_alone(tmp_path, capsys):
    """The quick start runs the builder every time: a dataset already there costs one line
    (build()'s "already built") and the fingerprint, not the summary again."""
    argv = ["--out-root", str(tmp_path), "--max-text-bytes", "100000", "--no-progress"]
    assert builder.main(argv) == 0
    first = capsys.readouterr().out.splitlines()
    assert builder.main(argv) == 0
    again = capsys.readouterr().out.splitlines()
    assert [line for line in first if line.startswith("train:")]
    assert len(again) == 2 and "already built and valid" in again[0]
    assert again[1] == first[-1] and again[1].startswith("data_fingerprint:")


def test_builder_fingerprint_is_the_trainers(tiny):
    """The builder's fingerprint and train_gpt.py's log line hash the same files the same way."""
    data, tokenizer = tiny.dataset_dir, tiny.tokenizer_path
    line = train_gpt.data_fingerprint(
        tokenizer, str(data / "fineweb_val_[0-9]*.bin"), str(data / "fineweb_train_*.bin")
    )
    assert line.split()[0] == f"data_fingerprint:{builder.data_fingerprint(data, tokenizer)}"
    assert [field.split(":")[0] for field in line.split()] == [
        "data_fingerprint",
        "tokenizer",
        "val_shards",
        "train_names_sizes",
    ]


def test_the_fingerprint_is_the_datas_wherever_it_lies_and_counts_every_train_shard(tiny, tmp_path):
    """The record check compares seeds by this line (`same_data`) while DATA_PATH differs
    between pods: a copy elsewhere prints the same line, one train shard fewer another."""

    def fingerprint(data: Path, tokenizer: Path) -> str:
        val, train = str(data / "fineweb_val_[0-9]*.bin"), str(data / "fineweb_train_*.bin")
        return train_gpt.data_fingerprint(tokenizer, val, train)

    here = fingerprint(tiny.dataset_dir, tiny.tokenizer_path)
    elsewhere = shutil.copytree(tiny.dataset_dir, tmp_path / "pod2" / tiny.dataset_dir.name)
    tokenizer = Path(shutil.copy(tiny.tokenizer_path, tmp_path / "pod2" / "tok.model"))
    assert fingerprint(elsewhere, tokenizer) == here
    sorted(elsewhere.glob("fineweb_train_*.bin"))[-1].unlink()
    assert fingerprint(elsewhere, tokenizer) != here


# ---------------------------------------------------------------------------------------------
# download_fineweb against a mirror laid out like the hub repo
# ---------------------------------------------------------------------------------------------
MIRROR_TRAIN_SHARDS = 3


@pytest.fixture
def mirror(tmp_path, tiny):
    """A hub-shaped directory: manifest, tokenizer files, 1 val and 3 train shards whose
    tokens are consecutive integers (so any mix-up of files shows)."""
    root = tmp_path / "mirror"
    shards = root / "datasets" / "datasets" / "fineweb10B_sp1024"
    tokenizers = root / "datasets" / "tokenizers"
    shards.mkdir(parents=True)
    tokenizers.mkdir(parents=True)
    (tokenizers / "fineweb_1024_bpe.model").write_bytes(tiny.tokenizer_path.read_bytes())
    (tokenizers / "fineweb_1024_bpe.vocab").write_text("<pad>\t0\n")
    write_shard(shards / shard_name("val", 0), np.arange(1000) % 1024)
    for i in range(MIRROR_TRAIN_SHARDS):
        write_shard(shards / shard_name("train", i), np.arange(i * 500, i * 500 + 500) % 1024)
    manifest = {
        "datasets": [
            {
                "name": "fineweb10B_sp1024",
                "tokenizer_name": "sp_bpe_1024",
                "stats": {"files_train": MIRROR_TRAIN_SHARDS, "files_val": 1},
            }
        ],
        "tokenizers": [
            {
                "name": "sp_bpe_1024",
                "model_path": "tokenizers/fineweb_1024_bpe.model",
                "vocab_path": "tokenizers/fineweb_1024_bpe.vocab",
            }
        ],
    }
    (root / "datasets" / "manifest.json").write_text(json.dumps(manifest))
    return root


def fetch_from(mirror_dir: Path, out: Path, train_shards: int):
    return downloader.download_dataset(
        train_shards=train_shards, out_root=out, mirror=mirror_dir, progress=False, log=None
    )


def test_download_fetches_tokenizer_val_and_requested_train_shards(mirror, tmp_path):
    out = tmp_path / "out"
    fetch_from(mirror, out, train_shards=2)
    got = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert got == [
        "datasets/fineweb10B_sp1024/fineweb_train_000000.bin",
        "datasets/fineweb10B_sp1024/fineweb_train_000001.bin",
        "datasets/fineweb10B_sp1024/fineweb_val_000000.bin",
        "datasets/fineweb10B_sp1024/tokenized_with.json",  # the tokenizer's name and sha256
        "tokenizers/fineweb_1024_bpe.model",
        "tokenizers/fineweb_1024_bpe.vocab",
    ]
    remote = mirror / "datasets" / "datasets" / "fineweb10B_sp1024"
    for name in ("fineweb_val_000000.bin", "fineweb_train_000001.bin"):
        assert (out / "datasets" / "fineweb10B_sp1024" / name).read_bytes() == (
            remote / name
        ).read_bytes()


def test_download_rerun_skips_verified_files_without_fetching(mirror, tmp_path):
    out = tmp_path / "out"
    first = fetch_from(mirror, out, train_shards=2)
    for shard in (mirror / "datasets" / "datasets" / "fineweb10B_sp1024").iterdir():
        shard.unlink()  # a second fetch of any shard would now fail
    second = fetch_from(mirror, out, train_shards=2)
    assert second.downloaded == [] and sorted(second.skipped) == sorted(first.downloaded)


def test_download_resumes_by_fetching_only_missing_files(mirror, tmp_path):
    out = tmp_path / "out"
    fetch_from(mirror, out, train_shards=1)
    result = fetch_from(mirror, out, train_shards=3)
    assert [p.name for p in result.downloaded] == [
        "fineweb_train_000001.bin",
        "fineweb_train_000002.bin",
    ]


def test_download_replaces_a_truncated_local_shard(mirror, tmp_path):
    out = tmp_path / "out"
    fetch_from(mirror, out, train_shards=1)
    local = out / "datasets" / "fineweb10B_sp1024" / "fineweb_train_000000.bin"
    local.write_bytes(local.read_bytes()[:1500])
    result = fetch_from(mirror, out, train_shards=1)
    assert result.downloaded == [local]
    assert train_gpt.read_shard_header(local) == 500


def test_download_rejects_a_corrupt_shard_naming_it(mirror, tmp_path, capsys):
    bad = mirror / "datasets" / "datasets" / "fineweb10B_sp1024" / "fineweb_train_000001.bin"
    raw = bytearray(bad.read_bytes())
    raw[0:4] = (12345).to_bytes(4, "little")  # wrong magic
    bad.write_bytes(bytes(raw))
    out = tmp_path / "out"
    code = downloader.main(
        ["--mirror", str(mirror), "--out-root", str(out), "--train-shards", "2", "--no-progress"]
    )
    err = capsys.readouterr().err
    assert code == 1
    assert "fineweb_train_000001.bin" in err and "magic" in err
    local_dir = out / "datasets" / "fineweb10B_sp1024"
    assert not (local_dir / "fineweb_train_000001.bin").exists()
    assert not [p for p in local_dir.iterdir() if p.name.startswith(".")]  # no partial left


def test_download_errors_when_more_train_shards_than_the_manifest_lists(mirror, tmp_path, capsys):
    code = downloader.main(
        [
            "--mirror",
            str(mirror),
            "--out-root",
            str(tmp_path / "out"),
            "--train-shards",
            str(MIRROR_TRAIN_SHARDS + 1),
            "--no-progress",
        ]
    )
    assert code == 2
    assert f"only {MIRROR_TRAIN_SHARDS} train shards" in capsys.readouterr().err
    assert not (tmp_path / "out" / "datasets").exists()  # checked before fetching anything


def test_download_unknown_variant_lists_what_the_manifest_has(mirror, tmp_path, capsys):
    code = downloader.main(
        [
            "--mirror",
            str(mirror),
            "--out-root",
            str(tmp_path / "out"),
            "--variant",
            "sp4096",
            "--no-progress",
        ]
    )
    assert code == 2
    assert "fineweb10B_sp1024" in capsys.readouterr().err


def test_download_names_a_file_missing_from_the_mirror(mirror, tmp_path, capsys):
    (mirror / "datasets" / "datasets" / "fineweb10B_sp1024" / "fineweb_val_000000.bin").unlink()
    code = downloader.main(
        [
            "--mirror",
            str(mirror),
            "--out-root",
            str(tmp_path / "out"),
            "--train-shards",
            "1",
            "--no-progress",
        ]
    )
    assert code == 1
    assert "fineweb_val_000000.bin" in capsys.readouterr().err


def test_download_offline_hub_fails_fast_with_one_clear_line(tmp_path):
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf_home"))
    start = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / "data" / "download_fineweb.py"),
            "--out-root",
            str(tmp_path / "out"),
            "--no-progress",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1
    assert time.monotonic() - start < 30
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "offline" in lines[0] and "--mirror" in lines[0]
