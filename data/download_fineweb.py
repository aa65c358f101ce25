"""Download the challenge's published FineWeb shards and tokenizer, resumably and verified.

A Hugging Face dataset repo lists what it holds in <remote-root>/manifest.json (remote root
"datasets" unless --remote-root says otherwise). This script reads that manifest and fetches,
for the dataset fineweb10B_<variant>:

    datasets/tokenizers/<tokenizer files>                      -> data/tokenizers/<same subpath>
    datasets/datasets/fineweb10B_sp1024/fineweb_val_*.bin      -> data/datasets/fineweb10B_sp1024/
    datasets/datasets/fineweb10B_sp1024/fineweb_train_*.bin    (the first --train-shards of them)
    datasets/datasets/fineweb10B_sp1024/fineweb_val_bytes_*.bin  (only if the manifest names them)

and writes data/datasets/fineweb10B_sp1024/tokenized_with.json: the manifest's name for the
tokenizer and the sha256 of its file, which train_gpt.py checks TOKENIZER_PATH against.

Which repo holds which variant (the April 2026 records use the last three):

    willdepueoai/parameter-golf           sp1024 (the default; the official baseline data)
    kevclark/parameter-golf               sp4096, sp8192
    romeerp/parameter-golf-caseops-v1     sp8192_lossless_caps_caseops_v1_reserved (CaseOps)

Usage:
    python data/download_fineweb.py                          # sp1024: tokenizer, val, 80 train
    python data/download_fineweb.py --train-shards 1         # enough for a smoke run
    python data/download_fineweb.py --repo-id kevclark/parameter-golf --variant sp8192 \\
        --train-shards 80
    python data/download_fineweb.py --repo-id kevclark/parameter-golf --variant sp4096
    python data/download_fineweb.py --repo-id romeerp/parameter-golf-caseops-v1 \\
        --variant sp8192_lossless_caps_caseops_v1_reserved
    python data/download_fineweb.py --mirror /mnt/pg-copy    # from a local copy of the repo

It ends by printing the command that trains on what it fetched: DATA_PATH=... TOKENIZER_PATH=...
VOCAB_SIZE=... .venv/bin/torchrun --standalone --nproc_per_node=8 train_gpt.py.

Manifest: a "datasets" list (name, tokenizer_name, stats.files_train, stats.files_val) and a
"tokenizers" list (name, model_path or path, optional vocab_path, optional vocab_size). Tokenizer
paths are relative to the remote root and keep their subfolders locally (tokenizers/caseops/x.model
lands at data/tokenizers/caseops/x.model); absolute paths and ".." are refused. A dataset may name
val-bytes sidecars with val_bytes_glob ("fineweb_val_bytes_*.bin": beside its shards; a glob with
a "/" is relative to the remote root); their number is stats.files_val_bytes, or files_val if the
manifest gives none, and file i is the glob with "*" replaced by i as 6 digits. Each sidecar is in
the shard format, entry j = the UTF-8 byte count of val token j; train_gpt.py reads them from
DATA_PATH for exact BPB. All manifest keys are read in one place (MANIFEST KEYS below).

Files already present and valid are skipped, so an interrupted run is resumed by running it
again. Each file is fetched under a hidden temporary name, checked (shards and sidecars by
data/shard_io.check_shard_header: magic, version, size; a .model tokenizer by loading it with
sentencepiece), and only then renamed into place, so a partial or corrupt download never looks
complete. Nothing here needs torch or numpy: on a fresh machine huggingface_hub, tqdm and
sentencepiece are enough. --mirror DIR reads a directory laid out like the hub repo
(DIR/datasets/manifest.json, ...) instead of the hub; everything else is the same code.
Exit codes: 0 done, 1 download or verification failed, 2 bad arguments.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

_REPO_ROOT = Path(__file__).resolve().parent.parent
if str(_REPO_ROOT) not in sys.path:  # run as a script, data/ is on sys.path but not the repo
    sys.path.insert(0, str(_REPO_ROOT))

from data.setup_hint import missing_package_message, shown  # noqa: E402
from data.shard_io import check_shard_header, record_tokenizer, shard_name  # noqa: E402

DEFAULT_REPO_ID = "willdepueoai/parameter-golf"
DEFAULT_OUT_ROOT = Path(__file__).resolve().parent  # the data/ folder beside this script
DEFAULT_VARIANT = "sp1024"
DEFAULT_TRAIN_SHARDS = 80
DEFAULT_REMOTE_ROOT = "datasets"  # the repo folder holding manifest.json and what it names

# ---------------------------------------------------------------------------------------------
# MANIFEST KEYS: every name this script reads from a manifest, in one place. The manifests are
# not formally specified, so where forks may spell a key differently all plausible spellings
# are listed, first match wins.
# ---------------------------------------------------------------------------------------------
TOKENIZER_FILE_KEYS = ("model_path", "path")  # the tokenizer file itself; model_path wins
TOKENIZER_VOCAB_FILE_KEY = "vocab_path"  # optional listing of the pieces, fetched if named
VOCAB_SIZE_KEY = "vocab_size"  # tokenizer entry, else dataset entry; printed as VOCAB_SIZE
VAL_BYTES_GLOB_KEYS = ("val_bytes_glob",)  # dataset entry (or its stats)
VAL_BYTES_COUNT_KEYS = ("files_val_bytes", "val_bytes_files")  # dataset stats (or entry)
# and: datasets[].name / tokenizer_name / stats.files_train / stats.files_val, tokenizers[].name

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
    kind: str  # "shard" (tokens or val bytes), "tokenizer" (a SentencePiece model) or "text"


@dataclass
class Plan:
    """What one download consists of, worked out from the manifest before fetching anything."""

    jobs: list[FileJob]
    dataset_dir: Path
    tokenizer_path: Path
    vocab_size: int | None
    val_shards: list[Path]
    val_bytes: list[Path]  # the val-bytes sidecars; empty if the manifest names none
    tokenizer_name: str = ""  # the manifest's name for it, recorded in tokenized_with.json


@dataclass
class DownloadResult:
    dataset_dir: Path
    tokenizer_path: Path
    vocab_size: int | None = None
    val_bytes: list[Path] = field(default_factory=list)
    downloaded: list[Path] = field(default_factory=list)
    skipped: list[Path] = field(default_factory=list)  # already present and verified

    def env(self) -> str:
        """The environment train_gpt.py needs to train on what was downloaded."""
        words = [f"DATA_PATH={shlex.quote(str(self.dataset_dir))}"]
        words.append(f"TOKENIZER_PATH={shlex.quote(str(self.tokenizer_path))}")
        if self.vocab_size is not None:
            words.append(f"VOCAB_SIZE={self.vocab_size}")
        return " ".join(words)


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
            f"{remote} is not in {repo_id} at this revision; check --repo-id, --remote-root "
            f"and --revision, or the repo layout may have changed (see its manifest.json)."
        )
    detail = (str(exc).strip().splitlines() or [""])[0][:200]
    return (
        f"could not download {remote} from the Hugging Face Hub ({repo_id}): "
        f"{type(exc).__name__}: {detail}. Check your network, or pass --mirror DIR."
    )


# ---------------------------------------------------------------------------------------------
# REPO PATHS: everything lives under the remote root; nothing may climb out of it
# ---------------------------------------------------------------------------------------------
def relative_repo_path(text: object, what: str) -> PurePosixPath:
    """`text` as a path relative to the remote root, refusing anything that would place a
    local file outside the output folder (an absolute path, or a '..' component)."""
    if not isinstance(text, str) or not text.strip():
        raise DownloadError(f"{what}: expected a relative path, got {text!r}")
    path = PurePosixPath(text)
    if path.is_absolute() or ".." in path.parts or path == PurePosixPath("."):
        raise DownloadError(
            f"{what}: {text!r} must be a relative path inside the repo's remote root "
            f"(no leading '/', no '..')"
        )
    return path


def normalize_remote_root(text: str) -> str:
    """--remote-root as 'a/b' ('' for the repo's top level)."""
    if text.strip() in ("", ".", "/"):
        return ""
    try:
        return relative_repo_path(text.strip().strip("/"), "--remote-root").as_posix()
    except DownloadError as exc:
        raise UsageError(str(exc)) from exc


def in_remote_root(remote_root: str, path: PurePosixPath | str) -> str:
    """The repo path of `path`, given relative to the remote root."""
    return f"{remote_root}/{path}" if remote_root else str(path)


# ---------------------------------------------------------------------------------------------
# MANIFEST -> list of files
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Manifest:
    data: dict
    root: str  # the remote root it was read from; every path it names is relative to this

    @property
    def where(self) -> str:  # for messages: "datasets/manifest.json"
        return in_remote_root(self.root, "manifest.json")


def read_manifest(fetch: Fetch, scratch_dir: Path, remote_root: str) -> Manifest:
    where = in_remote_root(remote_root, "manifest.json")
    path = scratch_dir / ".manifest.json.part"
    try:
        fetch(where, path)
        data = json.loads(path.read_text())
    except ValueError as exc:
        raise DownloadError(f"{where} is not valid JSON: {exc}") from exc
    finally:
        path.unlink(missing_ok=True)
    if not isinstance(data, dict) or not isinstance(data.get("datasets"), list):
        raise DownloadError(f"{where} has no 'datasets' list; the repo layout may have changed")
    return Manifest(data, remote_root)


def dataset_name(variant: str) -> str:
    return f"fineweb10B_{variant}"


def find_dataset(manifest: Manifest, variant: str) -> dict:
    name = dataset_name(variant)
    entries = [e for e in manifest.data["datasets"] if isinstance(e, dict)]
    for entry in entries:
        if entry.get("name") == name:
            return entry
    known = ", ".join(str(e.get("name")) for e in entries) or "none"
    raise UsageError(f"--variant {variant}: {name} is not in {manifest.where} (it lists: {known})")


def first_value(entry: dict, keys: tuple[str, ...]) -> object:
    """The first of `keys` present in `entry` or, failing that, in entry['stats']."""
    for where in (entry, entry.get("stats") or {}):
        for key in keys:
            if where.get(key) is not None:
                return where[key]
    return None


def find_tokenizer(manifest: Manifest, entry: dict) -> dict:
    tokenizers = [t for t in manifest.data.get("tokenizers") or [] if isinstance(t, dict)]
    wanted = entry.get("tokenizer_name")
    matches = [t for t in tokenizers if t.get("name") == wanted] if wanted else tokenizers
    if len(matches) != 1 or first_value(matches[0], TOKENIZER_FILE_KEYS) is None:
        raise DownloadError(
            f"{manifest.where} names no single tokenizer with a "
            f"{' or '.join(TOKENIZER_FILE_KEYS)} for {entry.get('name')} "
            f"(tokenizer_name={wanted!r})"
        )
    return matches[0]


def as_count(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise DownloadError(f"{what}: expected a file count (an integer >= 0), got {value!r}")
    return value


def count_in_manifest(manifest: Manifest, entry: dict, key: str) -> int:
    value = (entry.get("stats") or {}).get(key)
    if value is None:
        raise DownloadError(f"{manifest.where}: {entry.get('name')} has no stats.{key} count")
    return as_count(value, f"{manifest.where}: {entry.get('name')} stats.{key}")


def vocab_size_in_manifest(tokenizer: dict, entry: dict) -> int | None:
    """The vocab size the tokenizer entry (else the dataset entry) states; None if neither
    states a positive integer, in which case the printed env leaves VOCAB_SIZE out."""
    for where in (tokenizer, entry):
        value = where.get(VOCAB_SIZE_KEY)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def tokenizer_jobs(manifest: Manifest, tokenizer: dict, out_root: Path) -> list[FileJob]:
    """The tokenizer file (model_path or path), then its vocab listing if named. Each keeps its
    path relative to the remote root under out_root, as the upstream downloader does, so
    tokenizers/caseops/x.model lands at out_root/tokenizers/caseops/x.model."""
    what = f"{manifest.where}: tokenizer {tokenizer.get('name')!r}"
    model = relative_repo_path(first_value(tokenizer, TOKENIZER_FILE_KEYS), what)
    # Only a .model file is a SentencePiece model to load; other tokenizer files (a byte-level
    # tokenizer's JSON, say) are checked for being non-empty.
    jobs = [
        FileJob(
            in_remote_root(manifest.root, model),
            out_root / model,
            "tokenizer" if model.suffix == ".model" else "text",
        )
    ]
    if tokenizer.get(TOKENIZER_VOCAB_FILE_KEY):
        vocab = relative_repo_path(tokenizer[TOKENIZER_VOCAB_FILE_KEY], what)
        jobs.append(FileJob(in_remote_root(manifest.root, vocab), out_root / vocab, "text"))
    return jobs


def val_bytes_paths(manifest: Manifest, entry: dict) -> list[PurePosixPath]:
    """The val-bytes sidecars the dataset entry names, relative to the remote root; [] if it
    names none. Their count is VAL_BYTES_COUNT_KEYS, else the number of val shards (one
    sidecar per val shard, as upstream publishes them)."""
    pattern = first_value(entry, VAL_BYTES_GLOB_KEYS)
    if pattern is None:
        return []
    what = f"{manifest.where}: {entry.get('name')} {VAL_BYTES_GLOB_KEYS[0]}"
    glob = relative_repo_path(pattern, what)
    if str(glob).count("*") != 1 or "*" not in glob.name:
        raise DownloadError(f"{what}: expected one '*' in the file name, got {pattern!r}")
    if len(glob.parts) == 1:  # a bare file name: beside the dataset's shards
        glob = PurePosixPath("datasets", entry["name"], glob)
    count = first_value(entry, VAL_BYTES_COUNT_KEYS)
    if count is None:
        count = count_in_manifest(manifest, entry, "files_val")
    count = as_count(count, f"{manifest.where}: {entry.get('name')} {VAL_BYTES_COUNT_KEYS[0]}")
    return [glob.with_name(glob.name.replace("*", f"{i:06d}")) for i in range(count)]


def plan_files(manifest: Manifest, variant: str, train_shards: int, out_root: Path) -> Plan:
    """Tokenizer files, then all val shards and val-bytes sidecars, then the first
    train_shards train shards. Raises before anything is fetched if the manifest cannot
    satisfy the request."""
    entry = find_dataset(manifest, variant)
    available = count_in_manifest(manifest, entry, "files_train")
    if train_shards > available:
        raise UsageError(
            f"--train-shards {train_shards}: {entry['name']} has only {available} train shards"
        )
    tokenizer = find_tokenizer(manifest, entry)
    jobs = tokenizer_jobs(manifest, tokenizer, out_root)
    tokenizer_path = jobs[0].local

    shard_dir = PurePosixPath("datasets", entry["name"])  # relative to the remote root
    val_count = count_in_manifest(manifest, entry, "files_val")
    val = [shard_dir / shard_name("val", i) for i in range(val_count)]
    val_bytes = val_bytes_paths(manifest, entry)
    train = [shard_dir / shard_name("train", i) for i in range(train_shards)]
    jobs += [
        FileJob(in_remote_root(manifest.root, rel), out_root / rel, "shard")
        for rel in val + val_bytes + train
    ]
    return Plan(
        jobs=jobs,
        dataset_dir=out_root / shard_dir,
        tokenizer_path=tokenizer_path,
        vocab_size=vocab_size_in_manifest(tokenizer, entry),
        val_shards=[out_root / rel for rel in val],
        val_bytes=[out_root / rel for rel in val_bytes],
        tokenizer_name=str(tokenizer.get("name") or tokenizer_path.name),
    )


# ---------------------------------------------------------------------------------------------
# VERIFY AND DOWNLOAD
# ---------------------------------------------------------------------------------------------
def verify(job: FileJob, path: Path) -> None:
    """Raise ValueError/OSError if `path` is not a valid copy of job's file."""
    if job.kind == "shard":
        check_shard_header(path)  # magic, version and size == 1024 + 2 * count
    elif job.kind == "tokenizer":
        import sentencepiece as spm  # only here: a plain import of this module must not need it

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
    except (ValueError, OSError) as exc:  # shard_io.ShardError is a ValueError
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


def val_bytes_mismatch(plan: Plan) -> str | None:
    """Why the sidecars cannot describe the val split (one entry per val token), or None.
    A warning, not an error: the files are what the repo publishes, and the trainer decides."""
    if not plan.val_bytes:
        return None
    entries = sum(check_shard_header(p) for p in plan.val_bytes)
    tokens = sum(check_shard_header(p) for p in plan.val_shards)
    if entries == tokens:
        return None
    return (
        f"the {len(plan.val_bytes)} val-bytes sidecar(s) hold {entries} entries but the "
        f"{len(plan.val_shards)} val shard(s) hold {tokens} tokens; train_gpt.py expects one "
        f"entry per val token and will refuse them"
    )


def download_dataset(
    variant: str = DEFAULT_VARIANT,
    train_shards: int = DEFAULT_TRAIN_SHARDS,
    out_root: str | os.PathLike = DEFAULT_OUT_ROOT,
    repo_id: str = DEFAULT_REPO_ID,
    mirror: str | os.PathLike | None = None,
    revision: str | None = None,
    progress: bool = True,
    log: Callable[[str], None] | None = print,
    remote_root: str = DEFAULT_REMOTE_ROOT,
) -> DownloadResult:
    """Make out_root hold the variant's tokenizer, its val shards (and val-bytes sidecars, if
    the manifest names them) and its first train_shards train shards, fetching from `mirror`
    if given, else from the hub repo `repo_id`; the manifest is <remote_root>/manifest.json."""
    from tqdm import tqdm

    log = log or (lambda message: None)
    if train_shards < 0:
        raise UsageError(f"--train-shards must be >= 0, got {train_shards}")
    root = normalize_remote_root(remote_root)
    out_root = Path(out_root)
    out_root.mkdir(parents=True, exist_ok=True)
    if mirror is not None:
        if not Path(mirror).is_dir():
            raise UsageError(f"--mirror {mirror} is not a directory")
        fetch = mirror_fetcher(Path(mirror))
    else:
        fetch = hub_fetcher(repo_id, revision, out_root / ".cache" / "hub")
    plan = plan_files(read_manifest(fetch, out_root, root), variant, train_shards, out_root)

    result = DownloadResult(
        dataset_dir=plan.dataset_dir,
        tokenizer_path=plan.tokenizer_path,
        vocab_size=plan.vocab_size,
        val_bytes=plan.val_bytes,
    )
    todo = []
    for job in plan.jobs:
        problem = problem_with_local_copy(job)
        if problem is None:
            result.skipped.append(job.local)
        else:
            if problem != "missing":
                log(f"re-downloading {job.local.name}: {problem}")
            todo.append(job)
    log(
        f"{len(result.skipped)} of {len(plan.jobs)} files already present and verified; "
        f"fetching {len(todo)} from {mirror or repo_id}"
    )
    with tqdm(todo, desc="downloading", unit="file", disable=not progress) as bar:
        for job in bar:
            bar.set_postfix_str(job.local.name)
            download_one(job, fetch)
            result.downloaded.append(job.local)
    mismatch = val_bytes_mismatch(plan)
    if mismatch:
        log(f"warning: {mismatch}")
    digest = hashlib.sha256(plan.tokenizer_path.read_bytes()).hexdigest()
    record_tokenizer(plan.dataset_dir, plan.tokenizer_name, digest)  # train_gpt.py checks it
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
        help="tokenizer variant: X means dataset fineweb10B_X. sp1024 is in the default repo; "
        "sp4096 and sp8192 in kevclark/parameter-golf; "
        "sp8192_lossless_caps_caseops_v1_reserved in romeerp/parameter-golf-caseops-v1 "
        "(default: %(default)s)",
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
        help="Hugging Face dataset repo: kevclark/parameter-golf for sp4096/sp8192, "
        "romeerp/parameter-golf-caseops-v1 for CaseOps (default: %(default)s)",
    )
    parser.add_argument(
        "--remote-root",
        default=DEFAULT_REMOTE_ROOT,
        help="folder of the repo holding manifest.json and everything it names; '' for the "
        "repo's top level (default: %(default)s)",
    )
    parser.add_argument(
        "--revision", default=None, help="repo branch, tag or commit, hub only (default: main)"
    )
    parser.add_argument(
        "--mirror",
        type=Path,
        default=None,
        help="read from this local directory laid out like the hub repo "
        "(DIR/<remote-root>/manifest.json, ...) instead of the hub",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser.parse_args(argv)


def summary(result: DownloadResult) -> str:
    lines = [
        f"done: {len(result.downloaded)} downloaded, {len(result.skipped)} already present",
        f"dataset:   {result.dataset_dir}",
        f"tokenizer: {result.tokenizer_path}",
    ]
    if result.val_bytes:
        lines.append(
            f"val bytes: {len(result.val_bytes)} sidecar file(s) "
            f"({result.val_bytes[0].name}, ...): train_gpt.py reads them for exact BPB"
        )
    torchrun = shlex.quote(shown(_REPO_ROOT / ".venv" / "bin" / "torchrun"))  # setup.sh's
    script = shlex.quote(shown(_REPO_ROOT / "train_gpt.py"))
    launch = f"{torchrun} --standalone --nproc_per_node=8 {script}"
    lines.append(f"use:       {result.env()} {launch}")
    lines.append("           (--nproc_per_node: the number of GPUs, 1, 2, 4 or 8)")
    return "\n".join(lines)


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
            remote_root=args.remote_root,
        )
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as exc:  # huggingface_hub, tqdm or sentencepiece
        print(missing_package_message(exc.name or "") or f"error: {exc}", file=sys.stderr)
        return 1
    except (DownloadError, OSError, ImportError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(summary(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
