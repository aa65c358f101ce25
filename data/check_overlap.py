"""Does any validation document appear in the training shards? Count them, name examples.

A document is what follows a BOS (token 1) up to the next BOS, as train_gpt.py cuts them; the
tokens before a split's first BOS count as one too. Documents run across shard boundaries (the
published shards are cut every 100M tokens), so a train shard's last document is read on into
the next shard. Every validation document's tokens are hashed once; each train shard is then
streamed (np.memmap, BOS positions found a chunk at a time) and only its documents whose
(length, first token, last token) is some validation document's are hashed, and a hash match
is confirmed token by token. Memory: the validation index plus one chunk and one shard's BOS
positions, whatever the shards' size.

    python data/check_overlap.py data/datasets/fineweb10B_sp1024
    python data/check_overlap.py DATA_PATH --tokenizer data/tokenizers/x.model   # decoded examples

It writes DATA_PATH/overlap_checked.json (not with --no-record): the result, keyed to the shards
it checked (names, byte sizes and modification times: a shard written since no longer matches),
which train_gpt.py copies into its log as one line (`data_overlap: 0 of N validation documents in
the training shards (...)`), and which the preflight and records/submission.py check judge by one
rule (records/golf/rules.py overlap_status). Exit codes: 0 no overlap, 1 overlap found, 2 bad
input.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

_REPO_ROOT = Path(__file__).resolve().parent.parent
if str(_REPO_ROOT) not in sys.path:  # run as a script, data/ is on sys.path but not the repo
    sys.path.insert(0, str(_REPO_ROOT))

from data.shard_io import HEADER_BYTES, ShardError, check_shard_header, write_shard  # noqa: E402

BOS_ID = 1  # train_gpt.BOS_ID: every document starts with it
RECORD = "overlap_checked.json"  # train_gpt.OVERLAP_RECORD reads it
RECORD_FORMAT = 2  # 2: shards keyed by name, size and mtime_ns
TRAIN_GLOB, VAL_GLOB = "fineweb_train_*.bin", "fineweb_val_[0-9]*.bin"  # train_gpt.py's
CHUNK_TOKENS = 1 << 24  # BOS search window: 32 MiB of tokens at a time
EXAMPLES = 5


class OverlapError(ValueError):
    """Missing or malformed data; the message names the folder or file."""


# -----------------------------
# DOCUMENTS
# -----------------------------


def mapped(path: Path) -> np.ndarray:
    """A shard's tokens, mapped (never read whole); its header and size checked first."""
    try:
        count = check_shard_header(path)
    except ShardError as e:
        raise OverlapError(str(e)) from None
    if count == 0:
        return np.zeros(0, dtype="<u2")
    return np.memmap(path, dtype="<u2", mode="r", offset=HEADER_BYTES, shape=(count,))


def bos_positions(tokens: np.ndarray, chunk: int = CHUNK_TOKENS) -> np.ndarray:
    """Where the BOS tokens are, searched a chunk at a time (no shard-sized temporaries)."""
    found = [
        np.flatnonzero(tokens[a : a + chunk] == BOS_ID) + a for a in range(0, tokens.size, chunk)
    ]
    return np.concatenate(found) if found else np.zeros(0, dtype=np.int64)


def spans(tokens: np.ndarray, bos: np.ndarray, first: bool) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) of the documents beginning in these tokens, past their BOS; the last one
    ends at the tokens' end (its rest may be in the next shard). `first`: the tokens before the
    first BOS are a document (the split's start), else the previous shard's last one's rest."""
    starts, ends = bos + 1, np.append(bos[1:], tokens.size)[: bos.size]
    if first and (not bos.size or bos[0] > 0):
        starts, ends = (
            np.insert(starts, 0, 0),
            np.insert(ends, 0, bos[0] if bos.size else tokens.size),
        )
    return starts, ends


def keys(tokens: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """A cheap key per document, (length, first token, last token) in one int64: only documents
    whose key some validation document has are hashed."""
    lengths = (ends - starts).astype(np.int64)
    some = lengths > 0
    head = np.zeros(starts.size, dtype=np.int64)
    tail = np.zeros(starts.size, dtype=np.int64)
    head[some] = tokens[starts[some]]
    tail[some] = tokens[ends[some] - 1]
    return lengths << 32 | head << 16 | tail


def digest(tokens: np.ndarray) -> bytes:
    return hashlib.blake2b(
        np.ascontiguousarray(tokens, dtype="<u2").tobytes(), digest_size=16
    ).digest()


def first_bos(tokens: np.ndarray, chunk: int = CHUNK_TOKENS) -> int:
    """The first BOS's position, a chunk at a time; the tokens' length if there is none."""
    for a in range(0, tokens.size, chunk):
        hits = np.flatnonzero(tokens[a : a + chunk] == BOS_ID)
        if hits.size:
            return a + int(hits[0])
    return tokens.size


def rest_of_document(files: list[Path], after: int) -> np.ndarray:
    """The tokens of the shards after `after` up to the first BOS: a document's continuation."""
    parts = []
    for path in files[after + 1 :]:
        tokens = mapped(path)
        at = first_bos(tokens)
        parts.append(np.asarray(tokens[:at]))
        if at < tokens.size:
            break
    return np.concatenate(parts) if parts else np.zeros(0, dtype="<u2")


@dataclass
class ValidationIndex:
    """Every validation document (the val shards as one stream): its key and hash."""

    tokens: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    keys: np.ndarray  # sorted, unique
    by_digest: dict[bytes, int]  # hash -> the first document with it

    @property
    def documents(self) -> int:
        return int(self.starts.size)


def index_validation(files: list[Path], min_tokens: int) -> ValidationIndex:
    tokens = np.concatenate([np.asarray(mapped(f)) for f in files]) if files else np.zeros(0)
    tokens = tokens.astype("<u2", copy=False)
    starts, ends = spans(tokens, bos_positions(tokens), first=True)
    keep = ends - starts >= min_tokens
    starts, ends = starts[keep], ends[keep]
    by_digest = {}
    for i, (a, b) in enumerate(zip(starts.tolist(), ends.tolist(), strict=True)):
        by_digest.setdefault(digest(tokens[a:b]), i)
    return ValidationIndex(tokens, starts, ends, np.unique(keys(tokens, starts, ends)), by_digest)


# -----------------------------
# ONE TRAIN SHARD
# -----------------------------


@dataclass
class ShardResult:
    name: str
    documents: int  # documents beginning in this shard (of at least min_tokens)
    matches: list[dict] = field(default_factory=list)  # shard, offset, tokens, val_document
    seconds: float = 0.0


def check_shard(files: list[Path], i: int, val: ValidationIndex, min_tokens: int) -> ShardResult:
    """The documents beginning in train shard i (the last one read on into the next shards)
    that are validation documents."""
    t0 = time.perf_counter()
    tokens = mapped(files[i])
    bos = bos_positions(tokens)
    starts, ends = spans(tokens, bos, first=i == 0)
    result = ShardResult(files[i].name, 0)
    if not starts.size:
        result.seconds = time.perf_counter() - t0
        return result
    inner_s, inner_e = starts[:-1], ends[:-1]  # the last: maybe continued in the next shard
    keep = inner_e - inner_s >= min_tokens
    inner_s, inner_e = inner_s[keep], inner_e[keep]
    result.documents = int(inner_s.size)
    hits = np.flatnonzero(np.isin(keys(tokens, inner_s, inner_e), val.keys))
    candidates = [(int(inner_s[k]), np.asarray(tokens[inner_s[k] : inner_e[k]])) for k in hits]
    last = np.concatenate([np.asarray(tokens[starts[-1] :]), rest_of_document(files, i)])
    if last.size >= min_tokens:
        result.documents += 1
        candidates.append((int(starts[-1]), last))
    for start, doc in candidates:
        j = val.by_digest.get(digest(doc)) if doc.size else None
        if j is not None and np.array_equal(val.tokens[val.starts[j] : val.ends[j]], doc):
            offset = max(start - 1, 0)  # its BOS (the split's start has none)
            result.matches.append(
                {
                    "shard": files[i].name,
                    "offset": offset,
                    "tokens": int(doc.size),
                    "val_document": j,
                }
            )
    result.seconds = time.perf_counter() - t0
    return result


# -----------------------------
# THE DATASET
# -----------------------------


def dataset_files(data_path: str | Path) -> tuple[list[Path], list[Path]]:
    """(train shards, val shards) of a dataset folder, sorted; an error naming what is missing."""
    folder = Path(data_path)
    if not folder.is_dir():
        raise OverlapError(f"{folder}: no such folder (build or download the data: docs/data.md)")
    train, val = sorted(folder.glob(TRAIN_GLOB)), sorted(folder.glob(VAL_GLOB))
    for files, pattern in ((train, TRAIN_GLOB), (val, VAL_GLOB)):
        if not files:
            raise OverlapError(f"{folder / pattern}: no such files")
    return train, val


def shard_list(files: list[Path]) -> list[list]:
    """The shards as the record keys them: [name, bytes, mtime_ns] each (train_gpt.shard_key's:
    a shard written since the check, even to the same size, no longer matches)."""
    keys = []
    for f in files:
        stat = f.stat()
        keys.append([f.name, stat.st_size, stat.st_mtime_ns])
    return keys


@dataclass
class Report:
    data_path: str
    val_documents: int
    train_documents: int
    overlapping: int  # validation documents found in the training shards
    occurrences: int  # train documents that are validation documents (one may repeat)
    examples: list[dict]  # the first EXAMPLES matches (the record's)
    shards: dict  # {"train": [[name, bytes, mtime_ns], ...], "val": [...]}
    min_tokens: int
    seconds: float
    seconds_per_shard: list[float]
    matches: list[dict] = field(default_factory=list)  # every one (--write-clean's)

    def line(self) -> str:
        n = self.val_documents
        times = "occurrence" if self.occurrences == 1 else "occurrences"
        return (f"{self.overlapping} of {n} validation documents in the training shards "
                f"({self.occurrences} {times} in {len(self.shards['train'])} train shards, "
                f"{self.train_documents} documents)")  # fmt: skip

    def as_record(self) -> dict:
        when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
        return {"format": RECORD_FORMAT, "tool": "data/check_overlap.py", "checked": when,
                "val_documents": self.val_documents, "train_documents": self.train_documents,
                "overlapping": self.overlapping, "occurrences": self.occurrences,
                "min_tokens": self.min_tokens, "examples": self.examples,
                "shards": self.shards}  # fmt: skip


def merge(data_path, val: ValidationIndex, results: list[ShardResult], train, valf, min_tokens,
          seconds: float, examples: int = EXAMPLES) -> Report:  # fmt: skip
    """One report from every shard's result (in shard order; several ranks' parts too)."""
    matches = [m for r in results for m in r.matches]
    return Report(
        str(data_path), val.documents, sum(r.documents for r in results),
        len({m["val_document"] for m in matches}), len(matches), matches[:examples],
        {"train": shard_list(train), "val": shard_list(valf)}, min_tokens, seconds,
        [r.seconds for r in results], matches,
    )  # fmt: skip


def decode_examples(report: Report, val: ValidationIndex, tokenizer: str, n: int = 16) -> None:
    """Each example's first n tokens as text (TOKENIZER_PATH's SentencePiece model)."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(tokenizer))
    for m in report.examples:
        a = val.starts[m["val_document"]]
        m["text"] = sp.decode(val.tokens[a : a + n].tolist())


def check_overlap(data_path, min_tokens: int = 1, progress: bool = True, shards=None,
                  tokenizer: str | None = None) -> Report:  # fmt: skip
    """Every train shard (or those of `shards`, indices) against the validation documents."""
    t0 = time.perf_counter()
    train, valf = dataset_files(data_path)
    val = index_validation(valf, min_tokens)
    todo = range(len(train)) if shards is None else shards
    results = []
    from tqdm import tqdm

    with tqdm(todo, desc="train shards", unit="shard", disable=not progress) as bar:
        for i in bar:
            results.append(check_shard(train, i, val, min_tokens))
            bar.set_postfix_str(f"{results[-1].seconds:.2f}s/shard")
    report = merge(data_path, val, results, train, valf, min_tokens, time.perf_counter() - t0)
    if tokenizer:
        decode_examples(report, val, tokenizer)
    return report


def write_record(report: Report) -> Path:
    """DATA_PATH/overlap_checked.json, atomically (a reader never sees half of it)."""
    path = Path(report.data_path) / RECORD
    fd, tmp = tempfile.mkstemp(prefix=f".{RECORD}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(report.as_record(), f, indent=1)
            f.write("\n")
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


# -----------------------------
# CLEAN SHARDS
# -----------------------------


def removed_spans(report: Report, train: list[Path]) -> list[tuple[int, int]]:
    """Each matched document's tokens, its BOS included, as [start, end) in the train split read
    as one stream (a document may run on into the next shards)."""
    base, shards, at = {}, {}, 0
    for path in train:
        base[path.name], shards[path.name] = at, mapped(path)
        at += shards[path.name].size
    spans = []
    for m in report.matches:
        start = base[m["shard"]] + m["offset"]
        # the offset is the document's BOS, except for the split's first tokens (none before)
        has_bos = int(shards[m["shard"]][m["offset"]] == BOS_ID)
        spans.append((start, start + has_bos + m["tokens"]))
    return sorted(spans)


def write_clean(report: Report, out: Path) -> tuple[int, int]:
    """A copy of the dataset in `out` whose train shards hold no validation document: each
    shard rewritten without the matched documents' tokens (same names), every other file of
    the folder (validation shards, sidecars, the tokenizer's record) copied as it is. Returns
    (documents removed, tokens removed)."""
    folder = Path(report.data_path)
    train, _ = dataset_files(folder)
    spans = removed_spans(report, train)
    out.mkdir(parents=True, exist_ok=True)
    at, removed = 0, 0
    for path in train:
        tokens = np.asarray(mapped(path))
        keep = np.ones(tokens.size, dtype=bool)
        for a, b in spans:  # the parts of each span inside this shard
            lo, hi = max(a - at, 0), min(b - at, tokens.size)
            if lo < hi:
                keep[lo:hi] = False
        removed += int(tokens.size - keep.sum())
        write_shard(out / path.name, tokens[keep])
        at += tokens.size
    for path in sorted(folder.iterdir()):
        if path.is_file() and path not in train and path.name != RECORD:
            shutil.copy2(path, out / path.name)
    return len(spans), removed


def describe(report: Report) -> list[str]:
    """The result in lines: the count, then each example."""
    lines = [f"data_overlap: {report.line()}"]
    for m in report.examples:
        text = f" {m['text']!r}" if "text" in m else ""
        lines.append(f"  {m['shard']} token {m['offset']}: validation document "
                     f"{m['val_document']} ({m['tokens']} tokens){text}")  # fmt: skip
    return lines


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Count the validation documents that appear in a dataset's training shards "
        "(exact token sequences between BOS tokens), name examples, and record the result in "
        f"DATA_PATH/{RECORD} for train_gpt.py's log."
    )
    p.add_argument("data_path", help="a dataset folder (fineweb_train_*.bin, fineweb_val_*.bin)")
    p.add_argument("--tokenizer", help="a SentencePiece .model: decode each example's start")
    what = "ignore documents shorter than this (default 1: every non-empty one)"
    p.add_argument("--min-tokens", type=int, default=1, help=what)
    p.add_argument("--no-record", action="store_true", help=f"do not write DATA_PATH/{RECORD}")
    p.add_argument(
        "--write-clean",
        metavar="OUT",
        type=Path,
        help="write a copy of the dataset to the folder OUT whose train shards hold none of the "
        "validation documents found (then checked, and its record written there)",
    )
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    args = p.parse_args(argv)
    if args.min_tokens < 1:
        p.error(f"--min-tokens {args.min_tokens}: expected >= 1")
    out = args.write_clean
    if out is not None and out.exists() and (not out.is_dir() or any(out.iterdir())):
        p.error(f"--write-clean {out}: expected a new or empty folder (the clean copy goes there)")
    if out is not None and out.resolve() == Path(args.data_path).resolve():
        p.error(f"--write-clean {out}: that is DATA_PATH; give another folder")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        report = check_overlap(
            args.data_path, args.min_tokens, not args.quiet, None, args.tokenizer
        )
    except OverlapError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(report.as_record() | {"seconds": round(report.seconds, 3)}, indent=1)
          if args.json else "\n".join(describe(report)))  # fmt: skip
    per = report.seconds_per_shard
    if not args.json:
        print(f"{report.seconds:.2f}s, {sum(per) / max(len(per), 1):.3f}s per train shard")
    if not args.no_record:
        try:
            print(f"recorded in {write_record(report)}", file=sys.stderr)
        except OSError as e:
            print(
                f"warning: not recorded ({e}); train_gpt.py will log 'not checked'", file=sys.stderr
            )
    if args.write_clean is not None and report.overlapping:
        return clean_copy(report, args)
    return 1 if report.overlapping else 0


def clean_copy(report: Report, args) -> int:
    """--write-clean: the copy, then its own check (0 expected) and record."""
    documents, tokens = write_clean(report, args.write_clean)
    print(f"wrote {args.write_clean}: {documents} documents ({tokens} tokens) removed")
    clean = check_overlap(args.write_clean, args.min_tokens, not args.quiet)
    print("\n".join(describe(clean)))
    if not args.no_record:
        print(f"recorded in {write_record(clean)}", file=sys.stderr)
    return 1 if clean.overlapping else 0


if __name__ == "__main__":
    sys.exit(main())
