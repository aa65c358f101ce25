"""Download the challenge's published FineWeb shards and tokenizer, resumably and verified.

The Hugging Face dataset repo willdepueoai/parameter-golf lists what it holds in
datasets/manifest.json. This script reads that manifest, then fetches

    datasets/tokenizers/<tokenizer files>                       -> data/tokenizers/
    datasets/datasets/fineweb10B_sp1024/fineweb_val_*.bin       -> data/datasets/fineweb10B_sp1024/
    datasets/datasets/fineweb10B_sp1024/fineweb_train_*.bin     (the first --train-shards of them)

Usage:
    python data/download_fineweb.py                          # tokenizer, val, 80 train shards
    python data/download_fineweb.py --train-shards 1         # enough for a smoke run
    python data/download_fineweb.py --mirror /mnt/pg-copy    # from a local copy of the repo

Files already present and valid are skipped, so an interrupted run is resumed by running it
again. Each file is fetched under a hidden temporary name, checked (shards with train_gpt.py's
own read_shard_header: magic, version, size), and only then renamed into place, so a partial or
corrupt download never looks complete. --mirror DIR reads a directory laid out like the hub
repo (DIR/datasets/manifest.json, ...) instead of the hub; everything else is the same code.
Exit codes: 0 done, 1 download or verification failed, 2 bad arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

_REPO_ROOT = Path(__file__).resolve().parent.parent
if str(_REPO_ROOT) not in sys.path:  # run as a script, data/ is on sys.path but not the repo
    sys.path.insert(0, str(_REPO_ROOT))

from data.shard_io import shard_name, trainer_shard_reader  # noqa: E402

DEFAULT_REPO_ID = "willdepueoai/parameter-golf"
DEFAULT_OUT_ROOT = Path(__file__).resolve().parent  # the data/ folder beside this script
DEFAULT_VARIANT = "sp1024"
DEFAULT_TRAIN_SHARDS = 80
REMOTE_ROOT = "datasets"  # everything the manifest names lives under this folder of the repo
MANIFEST = f"{REMOTE_ROOT}/manifest.json"

# fetch(remote_path, dest): put the repo file `remote_path` at exactly `dest`, or raise
# DownloadError. The hub and a mirror differ only in this function.
Fetch = Callable[[str, Path], None]


class DownloadError(RuntimeError):
    """A download that failed; the message is one line saying what and what to do."""


class UsageError(DownloadError):
    """Arguments the manifest cannot satisfy (exit code 2, like argparse's usage errors)."""


@dataclass(frozen=True)
class FileJob:
    remote: str  # path in the repo: datasets/datasets/fineweb10B_sp1024/fineweb_val_000000.bin
    local: Path
    kind: str  # "shard", "tokenizer" (a SentencePiece model) or "text"


@dataclass
class DownloadResult:
    dataset_dir: Path
    tokenizer_path: Path
    downloaded: list[Path] = field(default_factory=list)
    skipped: list[Path] = field(default_factory=list)  # already present and verified


# ---------------------------------------------------------------------------------------------
# SOURCES: the hub, or a local mirror laid out like it
# ---------------------------------------------------------------------------------------------
def hub_fetcher(repo_id: str, revision: str | None, staging_dir: Path) -> Fetch:
    """Fetch from the Hugging Face Hub. hf_hub_download resumes its own partial downloads in
    staging_dir (same filesystem as the outputs), and the finished file is moved to dest."""

    def fetch(remote: str, dest: Path) -> None:
        from huggingface_hub import hf_hub_download

        try:
            path = hf_hub_download(
                repo_id, remote, repo_type="dataset", revision=revision, local_dir=staging_dir
            )
        except Exception as exc:
            if not is_hub_failure(exc):
                raise
            raise DownloadError(hub_error_message(exc, repo_id, remote)) from exc
        shutil.move(path, dest)

    return fetch


def mirror_fetcher(mirror_dir: Path) -> Fetch:
    """Fetch from a directory laid out like the hub repo (mirror_dir/datasets/manifest.json...)."""

    def fetch(remote: str, dest: Path) -> None:
        source = mirror_dir / remote
        if not source.is_file():
            raise DownloadError(f"{remote} is not in the mirror {mirror_dir} (expected {source})")
        shutil.copyfile(source, dest)

    return fetch


def is_hub_failure(exc: BaseException) -> bool:
    """Errors that mean 'the hub did not give us the file' (network, offline, 404, auth), as
    opposed to bugs. Checked by module so it holds across huggingface_hub versions."""
    package = type(exc).__module__.split(".")[0]
    return isinstance(exc, OSError) or package in {
        "huggingface_hub",
        "requests",
        "httpx",
        "urllib3",
    }


def hub_error_message(exc: BaseException, repo_id: str, remote: str) -> str:
    kinds = {cls.__name__ for cls in type(exc).__mro__}
    offline = os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}
    if offline or kinds & {"LocalEntryNotFoundError", "OfflineModeIsEnabled"}:
        why = "HF_HUB_OFFLINE is set" if offline else "no connection and no local copy"
        return (
            f"cannot download {remote} from the Hugging Face Hub ({repo_id}): offline "
            f"({why}). Connect to the internet (and unset HF_HUB_OFFLINE), or pass "
            f"--mirror DIR to read a local copy laid out like the hub repo."
        )
    if kinds & {"RepositoryNotFoundError", "GatedRepoError"}:
        return (
            f"dataset repo {repo_id} not found on the Hugging Face Hub, or not accessible "
            f"with your credentials; check --repo-id."
        )
    if kinds & {"RemoteEntryNotFoundError", "EntryNotFoundError", "RevisionNotFoundError"}:
        return (
            f"{remote} is not in {repo_id} at this revision; the repo layout may have "
            f"changed (check its {MANIFEST})."
        )
    detail = (str(exc).strip().splitlines() or [""])[0][:200]
    return (
        f"could not download {remote} from the Hugging Face Hub ({repo_id}): "
        f"{type(exc).__name__}: {detail}. Check your network, or pass --mirror DIR."
    )


# ---------------------------------------------------------------------------------------------
# MANIFEST -> list of files
# ---------------------------------------------------------------------------------------------
def read_manifest(fetch: Fetch, scratch_dir: Path) -> dict:
    path = scratch_dir / ".manifest.json.part"
    try:
        fetch(MANIFEST, path)
        manifest = json.loads(path.read_text())
    except ValueError as exc:
        raise DownloadError(f"{MANIFEST} is not valid JSON: {exc}") from exc
    finally:
        path.unlink(missing_ok=True)
    if not isinstance(manifest, dict) or not isinstance(manifest.get("datasets"), list):
        raise DownloadError(f"{MANIFEST} has no 'datasets' list; the repo layout may have changed")
    return manifest


def dataset_name(variant: str) -> str:
    return f"fineweb10B_{variant}"


def find_dataset(manifest: dict, variant: str) -> dict:
    name = dataset_name(variant)
    for entry in manifest["datasets"]:
        if entry.get("name") == name:
            return entry
    known = ", ".join(str(e.get("name")) for e in manifest["datasets"]) or "none"
    raise UsageError(f"--variant {variant}: {name} is not in {MANIFEST} (it lists: {known})")


def find_tokenizer(manifest: dict, entry: dict) -> dict:
    tokenizers = manifest.get("tokenizers") or []
    wanted = entry.get("tokenizer_name")
    matches = [t for t in tokenizers if t.get("name") == wanted] if wanted else tokenizers
    if len(matches) != 1 or not matches[0].get("model_path"):
        raise DownloadError(
            f"{MANIFEST} names no single tokenizer with a model_path for "
            f"{entry.get('name')} (tokenizer_name={wanted!r})"
        )
    return matches[0]


def count_in_manifest(entry: dict, key: str) -> int:
    value = (entry.get("stats") or {}).get(key)
    if not isinstance(value, int) or value < 0:
        raise DownloadError(f"{MANIFEST}: {entry.get('name')} has no stats.{key} count")
    return value


def plan_files(manifest: dict, variant: str, train_shards: int, out_root: Path) -> list[FileJob]:
    """Tokenizer files, then all val shards, then the first train_shards train shards."""
    entry = find_dataset(manifest, variant)
    available = count_in_manifest(entry, "files_train")
    if train_shards > available:
        raise UsageError(
            f"--train-shards {train_shards}: {entry['name']} has only {available} train shards"
        )
    tokenizer = find_tokenizer(manifest, entry)
    jobs = [
        FileJob(
            f"{REMOTE_ROOT}/{tokenizer['model_path']}",
            out_root / "tokenizers" / Path(tokenizer["model_path"]).name,
            "tokenizer",
        )
    ]
    if tokenizer.get("vocab_path"):
        jobs.append(
            FileJob(
                f"{REMOTE_ROOT}/{tokenizer['vocab_path']}",
                out_root / "tokenizers" / Path(tokenizer["vocab_path"]).name,
                "text",
            )
        )
    remote_dir = f"{REMOTE_ROOT}/datasets/{entry['name']}"
    local_dir = out_root / "datasets" / entry["name"]
    for split, count in (("val", count_in_manifest(entry, "files_val")), ("train", train_shards)):
        jobs += [
            FileJob(
                f"{remote_dir}/{shard_name(split, i)}", local_dir / shard_name(split, i), "shard"
            )
            for i in range(count)
        ]
    return jobs


# ---------------------------------------------------------------------------------------------
# VERIFY AND DOWNLOAD
# ---------------------------------------------------------------------------------------------
def verify(job: FileJob, path: Path) -> None:
    """Raise ValueError/OSError if `path` is not a valid copy of job's file."""
    if job.kind == "shard":
        trainer_shard_reader()(path)  # magic, version and size == 1024 + 2 * count
    elif job.kind == "tokenizer":
        import sentencepiece as spm

        try:
            spm.SentencePieceProcessor(model_file=str(path))
        except (RuntimeError, OSError) as exc:
            raise ValueError(f"{path} is not a SentencePiece model: {exc}") from exc
    elif path.stat().st_size == 0:
        raise ValueError(f"{path} is empty")


def problem_with_local_copy(job: FileJob) -> str | None:
    """None if job.local is present and verified, else why it must be (re)downloaded."""
    if not job.local.is_file():
        return "missing"
    try:
        verify(job, job.local)
    except (ValueError, OSError) as exc:  # train_gpt.DataError is a ValueError
        return str(exc)
    return None


def download_one(job: FileJob, fetch: Fetch) -> None:
    job.local.parent.mkdir(parents=True, exist_ok=True)
    # Hidden and not *.bin, so neither a trainer glob nor a later run mistakes it for a shard.
    part = job.local.with_name(f".{job.local.name}.part")
    try:
        fetch(job.remote, part)
        try:
            verify(job, part)
        except (ValueError, OSError) as exc:
            raise DownloadError(
                f"{job.remote} failed verification after download, not kept: {exc}"
            ) from exc
        os.replace(part, job.local)
    finally:
        part.unlink(missing_ok=True)


def download_dataset(
    variant: str = DEFAULT_VARIANT,
    train_shards: int = DEFAULT_TRAIN_SHARDS,
    out_root: str | os.PathLike = DEFAULT_OUT_ROOT,
    repo_id: str = DEFAULT_REPO_ID,
    mirror: str | os.PathLike | None = None,
    revision: str | None = None,
    progress: bool = True,
    log: Callable[[str], None] | None = print,
) -> DownloadResult:
    """Make out_root hold the variant's tokenizer, its val shards and its first train_shards
    train shards, fetching from `mirror` if given, else from the hub repo `repo_id`."""
    from tqdm import tqdm

    log = log or (lambda message: None)
    if train_shards < 0:
        raise UsageError(f"--train-shards must be >= 0, got {train_shards}")
    out_root = Path(out_root)
    out_root.mkdir(parents=True, exist_ok=True)
    if mirror is not None:
        if not Path(mirror).is_dir():
            raise UsageError(f"--mirror {mirror} is not a directory")
        fetch = mirror_fetcher(Path(mirror))
    else:
        fetch = hub_fetcher(repo_id, revision, out_root / ".cache" / "hub")
    jobs = plan_files(read_manifest(fetch, out_root), variant, train_shards, out_root)

    result = DownloadResult(
        dataset_dir=out_root / "datasets" / dataset_name(variant), tokenizer_path=jobs[0].local
    )
    todo = []
    for job in jobs:
        problem = problem_with_local_copy(job)
        if problem is None:
            result.skipped.append(job.local)
        else:
            if problem != "missing":
                log(f"re-downloading {job.local.name}: {problem}")
            todo.append(job)
    log(
        f"{len(result.skipped)} of {len(jobs)} files already present and verified; "
        f"fetching {len(todo)} from {mirror or repo_id}"
    )
    with tqdm(todo, desc="downloading", unit="file", disable=not progress) as bar:
        for job in bar:
            bar.set_postfix_str(job.local.name)
            download_one(job, fetch)
            result.downloaded.append(job.local)
    return result


# ---------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------
def non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--variant",
        default=DEFAULT_VARIANT,
        help="tokenizer variant: sp1024 means dataset fineweb10B_sp1024, the "
        "only one published officially (default: %(default)s)",
    )
    parser.add_argument(
        "--train-shards",
        type=non_negative_int,
        default=DEFAULT_TRAIN_SHARDS,
        help="how many train shards (1e8 tokens, ~200 MB each) to fetch (default: %(default)s)",
    )
    parser.add_argument(
        "--out-root",
        type=Path,
        default=DEFAULT_OUT_ROOT,
        help="writes <out-root>/datasets/fineweb10B_<variant>/ and "
        "<out-root>/tokenizers/ (default: %(default)s)",
    )
    parser.add_argument(
        "--repo-id",
        default=DEFAULT_REPO_ID,
        help="Hugging Face dataset repo (default: %(default)s)",
    )
    parser.add_argument(
        "--revision", default=None, help="repo branch, tag or commit, hub only (default: main)"
    )
    parser.add_argument(
        "--mirror",
        type=Path,
        default=None,
        help="read from this local directory laid out like the hub repo "
        "(DIR/datasets/manifest.json, ...) instead of the hub",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        result = download_dataset(
            args.variant,
            args.train_shards,
            args.out_root,
            args.repo_id,
            args.mirror,
            args.revision,
            progress=not args.no_progress,
        )
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (DownloadError, OSError, ImportError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(
        f"done: {len(result.downloaded)} downloaded, {len(result.skipped)} already present\n"
        f"dataset:   {result.dataset_dir}\ntokenizer: {result.tokenizer_path}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
