"""Build a small real-English dataset offline, from the Python standard library's docstrings.

For smoke runs of train_gpt.py on a laptop or CI when the published FineWeb shards are out of
reach. Nothing is downloaded and nothing is random: the text is every docstring of the stdlib
of the Python running this script (read with `ast`, modules are never imported), one document
per module, files in sorted order, test directories and site-packages skipped. A SentencePiece
BPE tokenizer with the challenge tokenizer's settings is trained on the train documents, and
both splits are written in the challenge's shard format:

    data/tokenizers/stdlib_1024_bpe.model (+ .vocab)
    data/datasets/stdlib_sp1024/fineweb_val_000000.bin      the first --val-docs documents
    data/datasets/stdlib_sp1024/fineweb_train_000000.bin    ... the rest
    data/datasets/stdlib_sp1024/build_info.json             recipe, counts and sha256 of it all

Usage:
    python data/build_local_dataset.py                       # ~1.8 MB of text, a few seconds
    python data/build_local_dataset.py --max-text-bytes 500000 --name stdlib_tiny
    python data/build_local_dataset.py --force               # rebuild even if up to date

It ends by printing the command that trains on what it built with the quick start's small CPU
settings (scripts/quickstart.env: a small model, 2 processes, a few minutes on a laptop), the
command that `bash scripts/quickstart.sh` runs on the default dataset, then the dataset's
`data_fingerprint:` (as a training run logs it). When the dataset is already built and valid it
says so and prints the fingerprint alone.

Same inputs (the same Python's stdlib and options) give byte-identical outputs. A run whose
outputs already exist and check out does nothing. Outputs appear atomically: the dataset is
built in a hidden temp directory and renamed into place.

From Python (tests use this to make a tiny dataset in a temp dir):
    from data.build_local_dataset import build
    result = build(tmp_path, max_text_bytes=1_000_000, progress=False)
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import importlib
import io
import json
import math
import os
import platform
import shlex
import shutil
import sys
import sysconfig
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

_REPO_ROOT = Path(__file__).resolve().parent.parent
if str(_REPO_ROOT) not in sys.path:  # run as a script, data/ is on sys.path but not the repo
    sys.path.insert(0, str(_REPO_ROOT))

from data.setup_hint import missing_package_message  # noqa: E402
from data.shard_io import check_shard_header, record_tokenizer, shard_name, write_shard  # noqa: E402

# The small CPU run of scripts/quickstart.sh, one NAME=value a line: the one definition of it.
QUICKSTART_ENV = _REPO_ROOT / "scripts" / "quickstart.env"
TRAIN_LAUNCH = ".venv/bin/torchrun --standalone --nproc_per_node=2 train_gpt.py"

# ---------------------------------------------------------------------------------------------
# DEFAULTS
# ---------------------------------------------------------------------------------------------
DEFAULT_OUT_ROOT = Path(__file__).resolve().parent  # the data/ folder beside this script
DEFAULT_VOCAB_SIZE = 1024
DEFAULT_VAL_FRACTION = 0.1  # val = the first 10% of documents unless --val-docs says otherwise
DEFAULT_SHARD_TOKENS = 2**17  # small, so even this small dataset spans several train shards
BUILD_INFO = "build_info.json"
BUILD_INFO_VERSION = 1
# Directory names never read: tests are code-shaped noise, site-packages is not the stdlib.
SKIP_DIRS = frozenset(
    {"test", "tests", "idle_test", "site-packages", "dist-packages", "__pycache__"}
)
DOC_NODES = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3


class BuildError(RuntimeError):
    """A build that cannot go ahead; the message says why and what to do."""


class OptionError(BuildError, ValueError):
    """An option out of range (exit code 2, like argparse's own usage errors)."""


@dataclass(frozen=True)
class BuildResult:
    dataset_dir: Path
    tokenizer_path: Path
    vocab_size: int
    num_docs: int
    num_val_docs: int
    text_bytes: int
    train_tokens: int
    val_tokens: int
    num_train_shards: int
    num_val_shards: int
    built: bool  # False when valid outputs already existed and were left alone
    seconds: float


def default_name(vocab_size: int) -> str:
    return f"stdlib_sp{vocab_size}"


def default_tokenizer_name(name: str, vocab_size: int) -> str:
    # The default dataset gets the challenge-style name; others get their own, so that two
    # datasets in one out_root never overwrite each other's tokenizer.
    return f"stdlib_{vocab_size}_bpe" if name == default_name(vocab_size) else f"{name}_bpe"


def default_source_dir() -> Path:
    return Path(sysconfig.get_path("stdlib"))


# ---------------------------------------------------------------------------------------------
# TEXT: one document per stdlib module, made of its docstrings in source order
# ---------------------------------------------------------------------------------------------
def list_source_files(source_dir: Path) -> list[Path]:
    """The .py files under source_dir outside test dirs and site-packages, in sorted order."""
    files = []
    for dirpath, dirnames, filenames in os.walk(source_dir):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS]
        rel_dir = Path(dirpath).relative_to(source_dir)
        files += [rel_dir / f for f in filenames if f.endswith(".py") and not f.startswith("test_")]
    # os.walk order depends on the filesystem; sorting the POSIX paths does not.
    return sorted(files, key=lambda p: p.as_posix())


def docstrings_in_source_order(tree: ast.AST) -> Iterator[str]:
    """Module, class and function docstrings, depth first in the order they appear."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, DOC_NODES):
            doc = ast.get_docstring(node, clean=True)
            if doc and doc.strip():
                yield doc.strip()
        stack.extend(reversed(list(ast.iter_child_nodes(node))))


def module_document(path: Path) -> str:
    """The docstrings of one file joined by blank lines, '' if it has none or cannot parse."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # invalid escape sequences in old code: not our concern
        try:
            tree = ast.parse(path.read_bytes(), filename=str(path))
        except (SyntaxError, ValueError):
            return ""
    text = "\n\n".join(docstrings_in_source_order(tree))
    # A few docstrings hold lone surrogates; they cannot be UTF-8, so make them '?'.
    return text.encode("utf-8", "replace").decode("utf-8")


def collect_documents(source_dir: Path, max_text_bytes: int | None, progress: bool) -> list[str]:
    """Documents in file order, stopping before the one that would pass max_text_bytes."""
    from tqdm import tqdm

    docs, total = [], 0
    for rel in tqdm(
        list_source_files(source_dir), desc="reading docstrings", unit="file", disable=not progress
    ):
        doc = module_document(source_dir / rel)
        if not doc:
            continue
        size = len(doc.encode("utf-8"))
        if max_text_bytes is not None and total + size > max_text_bytes:
            break  # a prefix of the stdlib, so a smaller limit gives a subset of a larger one
        docs.append(doc)
        total += size
    return docs


# ---------------------------------------------------------------------------------------------
# TOKENIZER: the challenge tokenizer's settings, trained deterministically
# ---------------------------------------------------------------------------------------------
def tokenizer_settings(vocab_size: int) -> dict:
    """SentencePiece trainer options, mirroring data/tokenizers/fineweb_1024_bpe.model.

    Same as the challenge model: BPE, nmt_nfkc, no dummy prefix, split_digits, character
    coverage 0.999, soft vocab limit, pad/bos/eos/unk = 0/1/2/3, default max sentence length.
    Different on purpose: byte_fallback is on (the published model has it off), so characters
    this small corpus rarely shows become byte tokens that BPB counts, not <unk> that it cannot;
    one thread and no sampling or shuffling, so the same text always gives the same model.
    """
    return dict(
        model_type="bpe",
        vocab_size=vocab_size,
        character_coverage=0.999,
        byte_fallback=True,
        split_digits=True,
        normalization_rule_name="nmt_nfkc",
        add_dummy_prefix=False,
        hard_vocab_limit=False,
        pad_id=PAD_ID,
        bos_id=BOS_ID,
        eos_id=EOS_ID,
        unk_id=UNK_ID,
        num_threads=1,
        input_sentence_size=0,
        shuffle_input_sentence=False,
        minloglevel=2,
    )


def training_sentences(docs: list[str]) -> list[str]:
    # Paragraphs, not whole documents: SentencePiece drops sentences longer than 4192 bytes.
    return [p for doc in docs for p in doc.split("\n\n") if p.strip()]


def train_tokenizer(docs: list[str], vocab_size: int) -> bytes:
    """Serialized SentencePiece model trained on `docs`."""
    import sentencepiece as spm

    model = io.BytesIO()  # in memory: no temp path ends up inside the model's trainer_spec
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(training_sentences(docs)),
            model_writer=model,
            **tokenizer_settings(vocab_size),
        )
    except RuntimeError as exc:
        raise BuildError(
            f"SentencePiece training failed ({exc}): with too little text, raise "
            f"--max-text-bytes or lower --vocab-size; a vocabulary too small for the byte pieces "
            f"and the characters needs a larger --vocab-size"
        ) from exc
    got = spm.SentencePieceProcessor(model_proto=model.getvalue()).get_piece_size()
    if got != vocab_size:
        raise BuildError(
            f"tokenizer has {got} pieces, not {vocab_size}: too little text for "
            f"this vocabulary; raise --max-text-bytes or lower --vocab-size"
        )
    return model.getvalue()


def vocab_listing(model: bytes) -> str:
    """The .vocab text SentencePiece writes beside a model: piece<TAB>score per line."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_proto=model)
    return "".join(
        f"{sp.id_to_piece(i)}\t{sp.get_score(i):g}\n" for i in range(sp.get_piece_size())
    )


def encode_documents(docs: list[str], model: bytes, progress: bool) -> list[np.ndarray]:
    """Each document as [BOS] + ids (no EOS, as in the challenge data)."""
    import numpy as np
    import sentencepiece as spm
    from tqdm import tqdm

    sp = spm.SentencePieceProcessor(model_proto=model)
    return [
        np.array([BOS_ID, *sp.encode(doc)], dtype=np.uint16)
        for doc in tqdm(docs, desc="tokenizing", unit="doc", disable=not progress)
    ]


# ---------------------------------------------------------------------------------------------
# OUTPUT: shards, build_info.json, validity check, atomic replacement
# ---------------------------------------------------------------------------------------------
def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def data_fingerprint(dataset_dir: Path, tokenizer_path: Path) -> str:
    """What train_gpt.py's `data_fingerprint:` log line says of this dataset, computed the same
    way: the sha256 of the tokenizer, of the validation shards' bytes in name order and of the
    train shards' `name size` lines, then of those three hex digests, one a line (16 digits)."""
    val, train = hashlib.sha256(), hashlib.sha256()
    for path in sorted(dataset_dir.glob("fineweb_val_[0-9]*.bin")):
        val.update(path.read_bytes())
    for path in sorted(dataset_dir.glob("fineweb_train_*.bin")):
        train.update(f"{path.name} {path.stat().st_size}\n".encode())
    digests = [sha256_file(tokenizer_path), val.hexdigest(), train.hexdigest()]
    return hashlib.sha256("".join(d + "\n" for d in digests).encode()).hexdigest()[:16]


def write_split(out_dir: Path, split: str, docs: list[np.ndarray], shard_tokens: int) -> list[dict]:
    """Concatenate the documents and cut the stream every shard_tokens (documents run across
    shard boundaries, as in the challenge data). Returns one record per shard written."""
    import numpy as np

    stream = np.concatenate(docs) if docs else np.zeros(0, dtype=np.uint16)
    records = []
    for index, start in enumerate(range(0, len(stream), shard_tokens)):
        path = write_shard(out_dir / shard_name(split, index), stream[start : start + shard_tokens])
        records.append(
            {
                "file": path.name,
                "tokens": int(min(shard_tokens, len(stream) - start)),
                "sha256": sha256_file(path),
            }
        )
    return records


def build_recipe(
    source_dir: Path,
    vocab_size: int,
    val_docs: int | None,
    shard_tokens: int,
    max_text_bytes: int | None,
    tokenizer_name: str,
) -> dict:
    """Everything the outputs depend on; an existing build counts only if its recipe matches."""
    return {
        "source_dir": str(source_dir),
        "python": platform.python_version(),
        "vocab_size": vocab_size,
        "val_docs": val_docs,
        "shard_tokens": shard_tokens,
        "max_text_bytes": max_text_bytes,
        "tokenizer": tokenizer_name,
        "tokenizer_settings": tokenizer_settings(vocab_size),
    }


def read_build_info(dataset_dir: Path) -> dict | None:
    try:
        return json.loads((dataset_dir / BUILD_INFO).read_text())
    except (OSError, ValueError):
        return None


def existing_build_problem(dataset_dir: Path, tokenizer_path: Path, recipe: dict) -> str | None:
    """None if dataset_dir holds a complete build of `recipe`, else what is wrong with it."""
    try:
        return build_info_mismatch(dataset_dir, tokenizer_path, recipe)
    except (KeyError, TypeError, AttributeError):
        return f"{dataset_dir / BUILD_INFO} is malformed"


def build_info_mismatch(dataset_dir: Path, tokenizer_path: Path, recipe: dict) -> str | None:
    info = read_build_info(dataset_dir)
    if info is None or info.get("format") != BUILD_INFO_VERSION:
        return f"{dataset_dir / BUILD_INFO} is missing or unreadable"
    if info.get("recipe") != recipe:
        return "it was built with different options"
    if not tokenizer_path.is_file() or sha256_file(tokenizer_path) != info["tokenizer"]["sha256"]:
        return f"{tokenizer_path} is missing or is not the one these shards were made with"
    for record in info["shards"]:
        path = dataset_dir / record["file"]
        try:
            if (
                check_shard_header(path) != record["tokens"]
                or sha256_file(path) != record["sha256"]
            ):
                return f"{path} does not match {BUILD_INFO}"
        except (OSError, ValueError) as exc:  # shard_io.ShardError is a ValueError
            return f"{path}: {exc}"
    expected = {r["file"] for r in info["shards"]}
    strays = sorted(p.name for p in dataset_dir.glob("fineweb_*.bin") if p.name not in expected)
    if strays:
        return f"it holds shards not listed in {BUILD_INFO}: {', '.join(strays)}"
    return None


def result_from_info(
    info: dict, dataset_dir: Path, tokenizer_path: Path, built: bool, seconds: float
) -> BuildResult:
    shards = info["shards"]
    return BuildResult(
        dataset_dir=dataset_dir,
        tokenizer_path=tokenizer_path,
        vocab_size=info["recipe"]["vocab_size"],
        num_docs=info["docs"],
        num_val_docs=info["val_docs"],
        text_bytes=info["text_bytes"],
        train_tokens=info["train_tokens"],
        val_tokens=info["val_tokens"],
        num_train_shards=sum(r["file"].startswith("fineweb_train_") for r in shards),
        num_val_shards=sum(r["file"].startswith("fineweb_val_") for r in shards),
        built=built,
        seconds=seconds,
    )


def write_file_atomically(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def move_into_place(built_dir: Path, dataset_dir: Path) -> None:
    """Rename built_dir to dataset_dir, replacing an older build (a directory cannot be
    replaced in one rename, so the old one is first renamed aside, then deleted)."""
    old = None
    if dataset_dir.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{dataset_dir.name}.old-", dir=dataset_dir.parent))
        os.replace(dataset_dir, old / dataset_dir.name)
    os.replace(built_dir, dataset_dir)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# BUILD
# ---------------------------------------------------------------------------------------------
def check_options(
    vocab_size: int, val_docs: int | None, shard_tokens: int, max_text_bytes: int | None
) -> None:
    # 4 special pieces + 256 byte-fallback pieces must fit, and ids must fit uint16 shards.
    if not 260 < vocab_size <= 65536:
        raise OptionError(f"vocab_size must be in 261..65536, got {vocab_size}")
    if val_docs is not None and val_docs < 1:
        raise OptionError(f"val_docs must be at least 1, got {val_docs}")
    if shard_tokens < 1:
        raise OptionError(f"shard_tokens must be at least 1, got {shard_tokens}")
    if max_text_bytes is not None and max_text_bytes < 1:
        raise OptionError(f"max_text_bytes must be positive, got {max_text_bytes}")


def split_point(num_docs: int, val_docs: int | None) -> int:
    """How many leading documents form the val split; both splits must be non-empty."""
    n_val = val_docs if val_docs is not None else max(1, math.ceil(num_docs * DEFAULT_VAL_FRACTION))
    if num_docs < 2 or n_val >= num_docs:
        raise BuildError(
            f"{num_docs} documents cannot give {n_val} val documents and a "
            f"non-empty train split; raise --max-text-bytes or lower --val-docs"
        )
    return n_val


def build(
    out_root: str | os.PathLike = DEFAULT_OUT_ROOT,
    name: str | None = None,
    vocab_size: int = DEFAULT_VOCAB_SIZE,
    val_docs: int | None = None,
    shard_tokens: int = DEFAULT_SHARD_TOKENS,
    max_text_bytes: int | None = None,
    source_dir: str | os.PathLike | None = None,
    tokenizer_name: str | None = None,
    force: bool = False,
    progress: bool = True,
    log: Callable[[str], None] | None = print,
) -> BuildResult:
    """Build (or find up to date) the dataset `name` under out_root/datasets and its tokenizer
    under out_root/tokenizers. val_docs=None means the first 10% of documents."""
    start = time.perf_counter()
    log = log or (lambda message: None)
    check_options(vocab_size, val_docs, shard_tokens, max_text_bytes)
    out_root = Path(out_root)
    source_dir = Path(source_dir) if source_dir is not None else default_source_dir()
    name = name or default_name(vocab_size)
    tokenizer_name = tokenizer_name or default_tokenizer_name(name, vocab_size)
    dataset_dir = out_root / "datasets" / name
    tokenizer_path = out_root / "tokenizers" / f"{tokenizer_name}.model"
    recipe = build_recipe(
        source_dir, vocab_size, val_docs, shard_tokens, max_text_bytes, tokenizer_name
    )

    if dataset_dir.exists():
        if not force and read_build_info(dataset_dir) is None:
            raise BuildError(
                f"{dataset_dir} exists but was not made by this builder; "
                f"pick another --name, or pass --force to replace it"
            )
        problem = None if force else existing_build_problem(dataset_dir, tokenizer_path, recipe)
        if not force and problem is None:
            log(f"{dataset_dir} is already built and valid; nothing to do (--force rebuilds)")
            info = read_build_info(dataset_dir)  # a build from before the record: add it
            record_tokenizer(dataset_dir, tokenizer_path.stem, info["tokenizer"]["sha256"])
            return result_from_info(
                read_build_info(dataset_dir),
                dataset_dir,
                tokenizer_path,
                built=False,
                seconds=time.perf_counter() - start,
            )
        log(f"rebuilding {dataset_dir}: " + ("--force" if force else problem))
    if not source_dir.is_dir():
        raise BuildError(f"source directory {source_dir} does not exist")

    docs = collect_documents(source_dir, max_text_bytes, progress)
    n_val = split_point(len(docs), val_docs)
    log(f"training a {vocab_size}-piece BPE tokenizer on {len(docs) - n_val} train documents")
    model = train_tokenizer(docs[n_val:], vocab_size)  # train docs only: val stays unseen
    encoded = encode_documents(docs, model, progress)

    dataset_dir.parent.mkdir(parents=True, exist_ok=True)
    tokenizer_path.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}.", suffix=".tmp", dir=dataset_dir.parent))
    try:
        shards = write_split(staging, "val", encoded[:n_val], shard_tokens) + write_split(
            staging, "train", encoded[n_val:], shard_tokens
        )
        info = {
            "format": BUILD_INFO_VERSION,
            "recipe": recipe,
            "docs": len(docs),
            "val_docs": n_val,
            "text_bytes": sum(len(d.encode("utf-8")) for d in docs),
            "val_tokens": int(sum(len(e) for e in encoded[:n_val])),
            "train_tokens": int(sum(len(e) for e in encoded[n_val:])),
            "tokenizer": {
                "file": f"tokenizers/{tokenizer_path.name}",
                "sha256": hashlib.sha256(model).hexdigest(),
            },
            "shards": shards,
        }
        (staging / BUILD_INFO).write_text(json.dumps(info, indent=1) + "\n")
        record_tokenizer(staging, tokenizer_name, info["tokenizer"]["sha256"])
        verify_shards(staging, shards)
        os.chmod(staging, 0o755)  # mkdtemp's 0700 would keep the shared dataset to its builder
        # Tokenizer first: if we die between the two renames, the old build_info's tokenizer
        # hash no longer matches, so the next run sees an invalid build and redoes it.
        write_file_atomically(tokenizer_path, model)
        write_file_atomically(
            tokenizer_path.with_suffix(".vocab"), vocab_listing(model).encode("utf-8")
        )
        move_into_place(staging, dataset_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return result_from_info(
        info, dataset_dir, tokenizer_path, built=True, seconds=time.perf_counter() - start
    )


def verify_shards(directory: Path, shards: list[dict]) -> None:
    """Every shard passes the header check (the same as the trainer's) before anything is
    published."""
    for record in shards:
        if check_shard_header(directory / record["file"]) != record["tokens"]:
            raise BuildError(f"{record['file']}: header disagrees with the tokens written")


# ---------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------
def quickstart_settings(path: Path = QUICKSTART_ENV) -> list[str]:
    """The NAME=value lines of scripts/quickstart.env in file order ([] if it cannot be read)."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return []
    return [line.strip() for line in lines if "=" in line and not line.lstrip().startswith("#")]


def train_command(dataset_dir: Path | str, tokenizer_path: Path | str, vocab_size: int) -> str:
    """The shell command that trains on a dataset with the quick start's small CPU settings: the
    dataset's variables, then the settings wrapped within 100 columns, then the launcher, joined
    by backslash-newlines."""
    data = [f"DATA_PATH={shlex.quote(str(dataset_dir))}"]
    data += [f"TOKENIZER_PATH={shlex.quote(str(tokenizer_path))}", f"VOCAB_SIZE={vocab_size}"]
    lines, line = [" ".join(data)], ""
    for setting in quickstart_settings():
        if line and len(line) + len(setting) > 96:
            lines.append(line)
            line = ""
        line = f"{line} {setting}".strip()
    lines += [line, TRAIN_LAUNCH] if line else [TRAIN_LAUNCH]
    return " \\\n  ".join(lines)


def summary(result: BuildResult) -> str:
    command = train_command(result.dataset_dir, result.tokenizer_path, result.vocab_size)
    return "\n".join(
        [
            f"dataset:   {result.dataset_dir}",
            f"tokenizer: {result.tokenizer_path}",
            f"documents: {result.num_docs} ({result.num_val_docs} val), "
            f"{result.text_bytes:,} bytes of text",
            f"val:       {result.val_tokens:,} tokens in {result.num_val_shards} shard(s)",
            f"train:     {result.train_tokens:,} tokens in {result.num_train_shards} shard(s)",
            f"time:      {result.seconds:.1f} s" + ("" if result.built else " (already built)"),
            "train on it from the repository root with the small CPU run of "
            "scripts/quickstart.sh\n(a few minutes; on GPUs, for the baseline model, keep only "
            "the first line's variables):",
            command,
        ]
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    dataset = default_name(DEFAULT_VOCAB_SIZE)
    parser = argparse.ArgumentParser(
        description=__doc__.split("\nFrom Python")[0],
        epilog="Then, from the repository root, train on the default dataset with the small CPU "
        "run of scripts/quickstart.sh\n(a small model, 2 processes, a few minutes):\n"
        + train_command(
            f"data/datasets/{dataset}",
            f"data/tokenizers/{default_tokenizer_name(dataset, DEFAULT_VOCAB_SIZE)}.model",
            DEFAULT_VOCAB_SIZE,
        )
        + "\n\nExit codes: 0 built or already up to date, 1 build failed, 2 bad arguments.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--out-root",
        type=Path,
        default=DEFAULT_OUT_ROOT,
        help="writes <out-root>/datasets/<name>/ and <out-root>/tokenizers/ (default: %(default)s)",
    )
    parser.add_argument(
        "--name", default=None, help="dataset directory name (default: stdlib_sp<vocab-size>)"
    )
    parser.add_argument(
        "--tokenizer-name",
        default=None,
        help="tokenizer file stem (default: stdlib_<vocab-size>_bpe for the "
        "default name, else <name>_bpe)",
    )
    parser.add_argument(
        "--vocab-size",
        type=int,
        default=DEFAULT_VOCAB_SIZE,
        help="tokenizer vocabulary size (default: %(default)s)",
    )
    parser.add_argument(
        "--val-docs",
        type=int,
        default=None,
        help="the first N documents form the val split (default: the first 10%%)",
    )
    parser.add_argument(
        "--shard-tokens",
        type=int,
        default=DEFAULT_SHARD_TOKENS,
        help="tokens per shard file (default: %(default)s)",
    )
    parser.add_argument(
        "--max-text-bytes",
        type=int,
        default=None,
        help="stop reading text after this many bytes, e.g. 1000000 for a tiny "
        "dataset (default: all of it)",
    )
    parser.add_argument(
        "--source-dir",
        type=Path,
        default=None,
        help="directory of .py files to read (default: this Python's stdlib, "
        f"{default_source_dir()})",
    )
    parser.add_argument("--force", action="store_true", help="rebuild even if up to date")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        for module in ("numpy", "sentencepiece", "tqdm"):  # one missing fails now, not later
            importlib.import_module(module)
        result = build(
            args.out_root,
            name=args.name,
            vocab_size=args.vocab_size,
            val_docs=args.val_docs,
            shard_tokens=args.shard_tokens,
            max_text_bytes=args.max_text_bytes,
            source_dir=args.source_dir,
            tokenizer_name=args.tokenizer_name,
            force=args.force,
            progress=not args.no_progress,
        )
    except OptionError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as exc:  # numpy, sentencepiece or tqdm
        print(missing_package_message(exc.name or "") or f"error: {exc}", file=sys.stderr)
        return 1
    except (BuildError, OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    fingerprint = data_fingerprint(result.dataset_dir, result.tokenizer_path)
    if result.built:  # else build() said it was there: the quick start's every run says no more
        print(summary(result))
    print(f"data_fingerprint:{fingerprint} (the training log's line of the same name)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
