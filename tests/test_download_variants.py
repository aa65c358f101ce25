"""download_fineweb.py for the April 2026 records' data: other repos, another remote root,
val-bytes sidecars, tokenizers in subfolders given by `path`, and no torch needed.

Everything runs against a temp directory laid out like a hub repo (--mirror); no network.
The CaseOps-like mirror keeps its manifest under a remote root other than "datasets", names
its sidecars with val_bytes_glob and gives its tokenizer as `path` in a subfolder.
"""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import sentencepiece as spm

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from data import download_fineweb as downloader  # noqa: E402
from data.shard_io import check_shard_header, shard_name, write_shard  # noqa: E402

VARIANT = "sp8192_lossless_caps_caseops_v1_reserved"
DATASET = f"fineweb10B_{VARIANT}"
ROOT = "caseops_v1"  # the mirror's remote root (the default is "datasets")
VAL_TOKENS = (300, 200)  # two val shards, so sidecar numbering and counting both show


@pytest.fixture(scope="module")
def sp_model() -> bytes:
    """A tiny real SentencePiece model (the downloader loads .model files to verify them)."""
    text = [f"the quick brown fox jumps over the lazy dog {i} times" for i in range(200)]
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(text),
        model_writer=model,
        vocab_size=48,
        normalization_rule_name="identity",
        minloglevel=2,
    )
    return model.getvalue()


def caseops_manifest(**dataset_extra) -> dict:
    dataset = {
        "name": DATASET,
        "tokenizer_name": "caseops_8192",
        "val_bytes_glob": "fineweb_val_bytes_*.bin",
        "stats": {"files_train": 2, "files_val": len(VAL_TOKENS)},
    }
    dataset.update(dataset_extra)
    tokenizer = {"name": "caseops_8192", "path": "tokenizers/caseops/caseops_8192.model"}
    tokenizer["vocab_size"] = 8192
    return {"datasets": [dataset], "tokenizers": [tokenizer]}


def write_manifest(mirror: Path, manifest: dict) -> None:
    (mirror / ROOT / "manifest.json").write_text(json.dumps(manifest))


@pytest.fixture
def mirror(tmp_path, sp_model) -> Path:
    """Shards hold distinct consecutive integers and each sidecar entry is a byte count
    (1..4), so a swapped or misplaced file shows."""
    root = tmp_path / "mirror"
    shards = root / ROOT / "datasets" / DATASET
    tokenizers = root / ROOT / "tokenizers" / "caseops"
    shards.mkdir(parents=True)
    tokenizers.mkdir(parents=True)
    (tokenizers / "caseops_8192.model").write_bytes(sp_model)
    start = 0
    for i, n in enumerate(VAL_TOKENS):
        write_shard(shards / shard_name("val", i), np.arange(start, start + n))
        write_shard(shards / f"fineweb_val_bytes_{i:06d}.bin", np.arange(n) % 4 + 1)
        start += n
    for i in range(2):
        write_shard(shards / shard_name("train", i), np.arange(1000 + 400 * i, 1400 + 400 * i))
    write_manifest(root, caseops_manifest())
    return root


def download(mirror: Path, out: Path, **kwargs):
    kwargs = dict(variant=VARIANT, train_shards=1, remote_root=ROOT, **kwargs)
    return downloader.download_dataset(
        out_root=out, mirror=mirror, progress=False, log=kwargs.pop("log", None), **kwargs
    )


def cli(mirror: Path, out: Path, *extra: str) -> int:
    base = ["--mirror", str(mirror), "--out-root", str(out), "--remote-root", ROOT]
    return downloader.main(
        [*base, "--variant", VARIANT, "--train-shards", "1", "--no-progress", *extra]
    )


def files_under(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


# ---------------------------------------------------------------------------------------------
# what lands where
# ---------------------------------------------------------------------------------------------
def test_caseops_download_fetches_sidecars_and_keeps_the_tokenizer_subfolder(mirror, tmp_path):
    out = tmp_path / "out"
    result = download(mirror, out)
    assert files_under(out) == [
        f"datasets/{DATASET}/fineweb_train_000000.bin",
        f"datasets/{DATASET}/fineweb_val_000000.bin",
        f"datasets/{DATASET}/fineweb_val_000001.bin",
        f"datasets/{DATASET}/fineweb_val_bytes_000000.bin",
        f"datasets/{DATASET}/fineweb_val_bytes_000001.bin",
        f"datasets/{DATASET}/tokenized_with.json",
        "tokenizers/caseops/caseops_8192.model",
    ]
    record = json.loads((out / "datasets" / DATASET / "tokenized_with.json").read_text())
    model = (out / "tokenizers" / "caseops" / "caseops_8192.model").read_bytes()
    assert record == {"tokenizer": record["tokenizer"], "sha256": hashlib.sha256(model).hexdigest()}
    assert record["tokenizer"]  # the manifest's name for it
    remote = mirror / ROOT / "datasets" / DATASET
    for i in range(len(VAL_TOKENS)):
        name = f"fineweb_val_bytes_{i:06d}.bin"
        assert (out / "datasets" / DATASET / name).read_bytes() == (remote / name).read_bytes()
    assert result.tokenizer_path == out / "tokenizers" / "caseops" / "caseops_8192.model"
    assert result.dataset_dir == out / "datasets" / DATASET
    assert [p.name for p in result.val_bytes] == [
        "fineweb_val_bytes_000000.bin",
        "fineweb_val_bytes_000001.bin",
    ]
    assert [check_shard_header(p) for p in result.val_bytes] == list(VAL_TOKENS)
    assert result.vocab_size == 8192


def test_sidecar_count_comes_from_the_manifest_when_it_gives_one(mirror, tmp_path):
    # One sidecar for two val shards: only fineweb_val_bytes_000000.bin is fetched, and since it
    # no longer covers every val token the download warns (but keeps what the repo publishes).
    manifest = caseops_manifest()
    manifest["datasets"][0]["stats"]["files_val_bytes"] = 1
    write_manifest(mirror, manifest)
    messages = []
    result = download(mirror, tmp_path / "out", log=messages.append)
    assert [p.name for p in result.val_bytes] == ["fineweb_val_bytes_000000.bin"]
    assert not (result.dataset_dir / "fineweb_val_bytes_000001.bin").exists()
    warnings = [m for m in messages if m.startswith("warning:")]
    assert len(warnings) == 1 and "300 entries" in warnings[0] and "500 tokens" in warnings[0]


def test_matching_sidecars_give_no_warning(mirror, tmp_path):
    messages = []
    download(mirror, tmp_path / "out", log=messages.append)
    assert not [m for m in messages if "warning" in m]


def test_a_sidecar_glob_with_a_folder_is_relative_to_the_remote_root(mirror, tmp_path):
    write_manifest(
        mirror, caseops_manifest(val_bytes_glob=f"datasets/{DATASET}/fineweb_val_bytes_*.bin")
    )
    result = download(mirror, tmp_path / "out")
    assert [p.name for p in result.val_bytes] == [
        "fineweb_val_bytes_000000.bin",
        "fineweb_val_bytes_000001.bin",
    ]
    assert all(p.parent == result.dataset_dir and p.is_file() for p in result.val_bytes)


def test_a_manifest_without_val_bytes_glob_fetches_no_sidecars(mirror, tmp_path):
    manifest = caseops_manifest()
    del manifest["datasets"][0]["val_bytes_glob"]
    write_manifest(mirror, manifest)
    result = download(mirror, tmp_path / "out")
    assert result.val_bytes == []
    assert not list(result.dataset_dir.glob("fineweb_val_bytes_*"))


@pytest.mark.parametrize("glob", ["fineweb_val_bytes.bin", "fineweb_*_bytes_*.bin", "*/x_*.bin"])
def test_a_sidecar_glob_without_exactly_one_star_in_the_name_is_refused(
    mirror, tmp_path, capsys, glob
):
    write_manifest(mirror, caseops_manifest(val_bytes_glob=glob))
    assert cli(mirror, tmp_path / "out") == 1
    err = capsys.readouterr().err.strip()
    assert "val_bytes_glob" in err and repr(glob) in err and len(err.splitlines()) == 1


# ---------------------------------------------------------------------------------------------
# verification of sidecars
# ---------------------------------------------------------------------------------------------
def test_a_corrupt_sidecar_is_rejected_naming_it(mirror, tmp_path, capsys):
    bad = mirror / ROOT / "datasets" / DATASET / "fineweb_val_bytes_000001.bin"
    bad.write_bytes(bad.read_bytes()[:-2])  # one entry short of its header's count
    out = tmp_path / "out"
    assert cli(mirror, out) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "fineweb_val_bytes_000001.bin" in err and "size mismatch" in err
    local_dir = out / "datasets" / DATASET
    assert not (local_dir / "fineweb_val_bytes_000001.bin").exists()
    assert not [p for p in local_dir.iterdir() if p.name.startswith(".")]  # no partial left


def test_a_damaged_local_sidecar_is_fetched_again(mirror, tmp_path):
    out = tmp_path / "out"
    download(mirror, out)
    local = out / "datasets" / DATASET / "fineweb_val_bytes_000000.bin"
    raw = bytearray(local.read_bytes())
    raw[4:8] = (2).to_bytes(4, "little")  # version 2
    local.write_bytes(bytes(raw))
    messages = []
    result = download(mirror, out, log=messages.append)
    assert result.downloaded == [local]
    assert any("fineweb_val_bytes_000000.bin" in m and "version" in m for m in messages)
    assert check_shard_header(local) == VAL_TOKENS[0]


# ---------------------------------------------------------------------------------------------
# tokenizer entries
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "path", ["../evil.model", "tokenizers/../../evil.model", "/etc/evil.model", ""]
)
def test_a_tokenizer_path_leaving_the_output_folder_is_refused(mirror, tmp_path, capsys, path):
    manifest = caseops_manifest()
    manifest["tokenizers"][0]["path"] = path
    write_manifest(mirror, manifest)
    out = tmp_path / "out"
    assert cli(mirror, out) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "caseops_8192" in err
    if path:
        assert repr(path) in err and "'..'" in err
    assert files_under(out) == []  # refused before anything was fetched


def test_model_path_wins_over_path(mirror, tmp_path):
    manifest = caseops_manifest()
    manifest["tokenizers"][0]["model_path"] = "tokenizers/caseops/caseops_8192.model"
    manifest["tokenizers"][0]["path"] = "tokenizers/not_in_the_mirror.model"
    write_manifest(mirror, manifest)
    result = download(mirror, tmp_path / "out")
    assert result.tokenizer_path == tmp_path / "out/tokenizers/caseops/caseops_8192.model"


def test_a_vocab_listing_in_a_subfolder_is_fetched_beside_the_model(mirror, tmp_path):
    (mirror / ROOT / "tokenizers" / "caseops" / "caseops_8192.vocab").write_text("<pad>\t0\n")
    manifest = caseops_manifest()
    manifest["tokenizers"][0]["vocab_path"] = "tokenizers/caseops/caseops_8192.vocab"
    write_manifest(mirror, manifest)
    out = tmp_path / "out"
    download(mirror, out)
    assert (out / "tokenizers/caseops/caseops_8192.vocab").read_text() == "<pad>\t0\n"


def test_a_model_file_that_is_not_sentencepiece_is_rejected(mirror, tmp_path, capsys):
    (mirror / ROOT / "tokenizers" / "caseops" / "caseops_8192.model").write_bytes(b"not a model")
    assert cli(mirror, tmp_path / "out") == 1
    err = capsys.readouterr().err
    assert "caseops_8192.model" in err and "SentencePiece" in err


# ---------------------------------------------------------------------------------------------
# remote root and CLI output
# ---------------------------------------------------------------------------------------------
def test_the_default_remote_root_does_not_find_this_repos_manifest(mirror, tmp_path, capsys):
    code = downloader.main(
        ["--mirror", str(mirror), "--out-root", str(tmp_path / "out"), "--variant", VARIANT]
    )
    assert code == 1
    assert "datasets/manifest.json is not in the mirror" in capsys.readouterr().err


@pytest.mark.parametrize("root", ["../up", "caseops_v1/../.."])
def test_a_remote_root_outside_the_repo_is_a_usage_error(mirror, tmp_path, capsys, root):
    assert cli(mirror, tmp_path / "out", "--remote-root", root) == 2
    assert "--remote-root" in capsys.readouterr().err


def test_slashes_around_the_remote_root_are_ignored(mirror, tmp_path):
    # Repo paths are always relative to the repo, so "/caseops_v1/" can only mean caseops_v1.
    assert cli(mirror, tmp_path / "out", "--remote-root", f"/{ROOT}/") == 0


def test_cli_prints_the_tokenizer_location_and_the_trainer_env(mirror, tmp_path, capsys):
    out = tmp_path / "out"
    assert cli(mirror, out) == 0
    stdout = capsys.readouterr().out
    model = out / "tokenizers" / "caseops" / "caseops_8192.model"
    assert f"tokenizer: {model}" in stdout
    env = f"DATA_PATH={out / 'datasets' / DATASET} TOKENIZER_PATH={model} VOCAB_SIZE=8192"
    assert env in stdout
    assert "fineweb_val_bytes_000000.bin" in stdout


def test_cli_leaves_vocab_size_out_when_the_manifest_gives_none(mirror, tmp_path, capsys):
    manifest = caseops_manifest()
    del manifest["tokenizers"][0]["vocab_size"]
    write_manifest(mirror, manifest)
    assert cli(mirror, tmp_path / "out") == 0
    stdout = capsys.readouterr().out
    assert "TOKENIZER_PATH=" in stdout and "VOCAB_SIZE" not in stdout


def test_help_names_the_repos_of_the_april_records(capsys):
    with pytest.raises(SystemExit):
        downloader.main(["--help"])
    text = capsys.readouterr().out
    assert "kevclark/parameter-golf" in text and "romeerp/parameter-golf-caseops-v1" in text
    assert "--remote-root" in text and VARIANT in text


# ---------------------------------------------------------------------------------------------
# no torch (nor numpy) on a fresh pod
# ---------------------------------------------------------------------------------------------
def test_the_downloader_imports_and_runs_without_torch_or_numpy(mirror, tmp_path):
    # sys.modules[name] = None makes every later `import name` raise ImportError.
    script = textwrap.dedent(
        f"""
        import sys
        sys.modules["torch"] = None
        sys.modules["numpy"] = None
        import data.download_fineweb as downloader
        from data.shard_io import check_shard_header
        assert "sentencepiece" not in sys.modules, "sentencepiece imported eagerly"
        assert "train_gpt" not in sys.modules
        code = downloader.main([
            "--mirror", {str(mirror)!r}, "--out-root", {str(tmp_path / "out")!r},
            "--remote-root", {ROOT!r}, "--variant", {VARIANT!r}, "--train-shards", "2",
            "--no-progress",
        ])
        assert code == 0, code
        assert "sentencepiece" in sys.modules  # the tokenizer was verified after all
        print("torchless ok")
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert "torchless ok" in proc.stdout
    sidecar = tmp_path / "out" / "datasets" / DATASET / "fineweb_val_bytes_000001.bin"
    assert check_shard_header(sidecar) == VAL_TOKENS[1]
