"""Pack a script into a self-extracting form, and check the result.

Every byte of the shipped train_gpt.py counts in the 16,000,000-byte artifact. Two forms:

- The record's form (`record_pack_source`): the source minified by python-minifier with the
  frontier record's options (RECORD_MINIFY), brotli quality 11, base85, in
  `import brotli,base64` / `exec(brotli.decompress(base64.b85decode("...")))` and a newline.
  The accepted records count their code this way (docs/frontier.md#code-bytes); a record
  folder made by `new` ships train_gpt.py specialised to its run's settings
  (records/golf/specialize.py) in this form, and `pack --preset/--set/--log` writes it.
  `pack --record` packs a whole script so. It needs the python-minifier and brotli packages
  (requirements.txt); it unpacks to the minified source.
- The standard-library form (`pack_source`, `pack`, `new --pack`): the script byte for byte,
  bz2 level 9, base85, in `import bz2,base64` / `exec(bz2.decompress(base64.b85decode("...")))`
  (no final newline), for a script shipped whole where brotli may be missing.

`unpack` reads both (and the lzma/zlib variants merged records used) without running them.
"""

from __future__ import annotations

import base64
import bz2
import lzma
import os
import re
import subprocess
import sys
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path

from .errors import MissingPackage, SubmissionError
from .folders import write_bytes_atomic
from .logs import Evaluation, parse_log
from .rules import ARTIFACT_LIMIT_BYTES

PACK_HEAD = b'import bz2,base64\nexec(bz2.decompress(base64.b85decode("'
PACK_TAIL = b'")))'
BZ2_LEVEL = 9
RECORD_HEAD = b'import brotli,base64\nexec(brotli.decompress(base64.b85decode("'
RECORD_TAIL = b'")))\n'
# pyminify --no-rename-locals --no-hoist-literals --remove-literal-statements --remove-asserts
# --prefer-single-line, as python_minifier.minify's keywords
RECORD_MINIFY = dict(
    rename_locals=False,
    hoist_literals=False,
    remove_literal_statements=True,
    remove_asserts=True,
    prefer_single_line=True,
)
# A specialised script (records/golf/specialize.py) is run, never imported or read by a person:
# its local and module-level names shrink too (8% fewer counted bytes for #1855's settings), all
# but the builtins its settings class's annotations name (the environment is parsed by them).
SPECIALIZED_MINIFY = RECORD_MINIFY | dict(
    rename_locals=True, rename_globals=True, preserve_globals=["int", "float", "str", "bool"]
)


def pack_source(source: bytes) -> bytes:
    """The packed file for `source`: deterministic, see the module docstring for the format."""
    return PACK_HEAD + base64.b85encode(bz2.compress(source, BZ2_LEVEL)) + PACK_TAIL


def _module(name: str, purpose: str):
    try:
        return __import__(name)
    except ImportError:
        raise MissingPackage(
            f"{purpose} needs the {name} package (pip install -r requirements.txt)"
        ) from None


def minify_source(source: bytes, renamed: bool = False) -> bytes:
    """The record's minified source (RECORD_MINIFY, or SPECIALIZED_MINIFY when `renamed`): what
    its packed form runs."""
    minifier = _module("python_minifier", "the record's packing (--record)")
    options = SPECIALIZED_MINIFY if renamed else RECORD_MINIFY
    return minifier.minify(source.decode("utf-8"), **options).encode("utf-8")


def record_pack_source(source: bytes, renamed: bool = False) -> bytes:
    """The frontier record's packed file for `source` (module docstring): its counted code.
    `renamed`: locals and globals renamed too (a specialised script, records/golf/specialize.py)."""
    return record_wrap(minify_source(source, renamed))


def record_wrap(minified: bytes) -> bytes:
    """The record's wrapper around brotli quality 11 of `minified`, base85."""
    brotli = _module("brotli", "the record's packing (--record)")
    return RECORD_HEAD + base64.b85encode(brotli.compress(minified, quality=11)) + RECORD_TAIL


def compressor_sizes(source: bytes) -> dict[str, int]:
    """Payload bytes of each standard-library compressor at its strongest setting."""
    return {
        "bz2 level 9": len(bz2.compress(source, 9)),
        "lzma preset 9": len(lzma.compress(source, preset=9)),
        "lzma preset 9e": len(lzma.compress(source, preset=9 | lzma.PRESET_EXTREME)),
        "zlib level 9": len(zlib.compress(source, 9)),
    }


# -----------------------------
# UNPACKING (never by exec)
# -----------------------------

_WRAPPER = re.compile(
    rb"""\A\s*import\s+(?P<imports>[^\n;]+)[\n;]\s*
    exec\(\s*(?P<mod>\w+)\.decompress\(\s*(?P<enc>\w+)\.b(?P<base>85|64)decode\(\s*
    (?P<q>["'])(?P<data>[^"']*)(?P=q)\s*\)\s*\)\s*(?:\.decode\(\s*\))?\s*\)\s*\Z""",
    re.VERBOSE,
)
_DECOMPRESSORS = {"bz2": bz2.BZ2Decompressor, "lzma": lzma.LZMADecompressor}
_MAX_UNPACKED = ARTIFACT_LIMIT_BYTES  # no script is larger than the artifact it counts in


def _aliases(imports: bytes) -> dict[str, str]:
    """`lzma as L,base64 as B` -> {"L": "lzma", "B": "base64"}."""
    out = {}
    for part in imports.decode("ascii", "replace").split(","):
        words = part.split()
        if len(words) == 3 and words[1] == "as":
            out[words[2]] = words[0]
        elif len(words) == 1:
            out[words[0]] = words[0]
    return out


def _decompress(module: str, data: bytes) -> bytes | None:
    """Decompress at most _MAX_UNPACKED bytes; None if the data is not that format."""
    if module == "brotli":  # (the record's form; without the package it is not read)
        try:
            import brotli

            out = brotli.decompress(data)
        except Exception:
            return None
        return out if len(out) <= _MAX_UNPACKED else None
    d = zlib.decompressobj() if module == "zlib" else _DECOMPRESSORS[module]()
    try:
        out = d.decompress(data, _MAX_UNPACKED)
    except (OSError, EOFError, ValueError, lzma.LZMAError, zlib.error):
        return None
    return out


def unpack(packed: bytes) -> bytes | None:
    """The source a packed script runs (`exec` of a decompressed base85/base64 payload), read
    without running it; None for anything else. Reads our format and the lzma/zlib variants
    merged records used (`import lzma as L,base64 as B` ...)."""
    m = _WRAPPER.match(packed)
    if not m:
        return None
    names = _aliases(m.group("imports"))
    module, encoder = names.get(m.group("mod").decode()), names.get(m.group("enc").decode())
    if module not in ("bz2", "lzma", "zlib", "brotli") or encoder != "base64":
        return None
    decode = base64.b85decode if m.group("base") == b"85" else base64.b64decode
    try:
        payload = decode(m.group("data"))
    except ValueError:
        return None
    return _decompress(module, payload)


# -----------------------------
# THE PACK COMMAND
# -----------------------------


def check_packed(source: bytes, record: bool = False) -> bytes:
    """pack_source(source) (or record_pack_source), refused when it would not save bytes or not
    unpack exactly (to the source, or to its minified form)."""
    packed = record_pack_source(source) if record else pack_source(source)
    if len(packed) >= len(source):
        raise SubmissionError(
            f"packing would grow the script from {len(source):,} to {len(packed):,} bytes; "
            "keep it readable"
        )
    if unpack(packed) != (minify_source(source) if record else source):  # (a broken compressor)
        raise SubmissionError("the packed script does not decompress to the original")
    return packed


@dataclass
class PackResult:
    original: int
    packed: int
    out: Path

    @property
    def saved(self) -> int:
        return self.original - self.packed


def write_packed(script: Path, out: Path, record: bool = False) -> PackResult:
    """Pack `script` into `out` (atomically), after checking that it unpacks byte for byte."""
    try:
        source = script.read_bytes()
    except OSError as exc:
        raise SubmissionError(f"cannot read {script}: {exc.strerror or exc}") from None
    if not source.strip():
        raise SubmissionError(f"{script} is empty")
    if unpack(source) is not None:
        raise SubmissionError(f"{script} is already packed")
    if out.resolve() == script.resolve():
        raise SubmissionError("-o must name a new file, not the script itself")
    packed = check_packed(source, record)
    compile(packed, str(out), "exec")
    out.parent.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(out, packed)
    return PackResult(len(source), len(packed), out)


# -----------------------------
# RUN VERIFICATION (torchrun, tiny CPU config)
# -----------------------------

# A model small enough for two CPU processes in seconds, in the baseline's variables.
TINY_RUN_ENV = {
    "NUM_LAYERS": "2",
    "MODEL_DIM": "64",
    "NUM_HEADS": "4",
    "NUM_KV_HEADS": "2",
    "MLP_MULT": "2",
    "TRAIN_SEQ_LEN": "64",
    "TRAIN_BATCH_TOKENS": "1024",
    "VAL_BATCH_SIZE": "4096",
    "ITERATIONS": "4",
    "WARMUP_STEPS": "1",
    "VAL_LOSS_EVERY": "0",
    "TRAIN_LOG_EVERY": "1",
    "WARMDOWN_ITERS": "2",
    "MAX_WALLCLOCK_SECONDS": "0",
    "SEED": "1337",
    "OMP_NUM_THREADS": "1",
    "PYTHONUNBUFFERED": "1",
}
# Set by an outer torchrun or by the user's shell; they would leak into the runs.
_SCRUB = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
    "RUN_ID",
)


@dataclass
class RunOutcome:
    script: Path
    returncode: int
    stdout: str
    stderr: str

    @property
    def final(self) -> Evaluation | None:
        return parse_log(self.stdout).scored

    def final_line(self) -> str:
        e = self.final
        return "none" if e is None else f"{e.label} val_loss:{e.loss_text} val_bpb:{e.bpb_text}"

    def tail(self) -> str:
        return (self.stdout[-1500:] + "\n" + self.stderr[-1500:]).strip()


def torchrun(script: Path, env: dict[str, str], nproc: int, timeout: float) -> RunOutcome:
    """`torchrun --standalone --nproc_per_node=nproc script` in a fresh temporary folder."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    cmd += [f"--nproc_per_node={nproc}", str(script.resolve())]
    full_env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    full_env.update(env)
    with tempfile.TemporaryDirectory(prefix="pack-verify-") as work:
        try:
            proc = subprocess.run(
                cmd, cwd=work, env=full_env, capture_output=True, text=True, timeout=timeout
            )
        except subprocess.TimeoutExpired:
            return RunOutcome(script, 124, "", f"timed out after {timeout:.0f} s")
    return RunOutcome(script, proc.returncode, proc.stdout, proc.stderr)


def verify_runs(
    original: Path,
    packed: Path,
    env: dict[str, str],
    nproc: int = 2,
    timeout: float = 600.0,
    say=print,
) -> bool:
    """Run both scripts with the same tiny config; True when both end on the same score line."""
    outcomes = []
    for script in (original, packed):
        say(f"running torchrun --nproc_per_node={nproc} {script.name} (tiny CPU config) ...")
        outcome = torchrun(script, {**env, "RUN_ID": f"verify_{len(outcomes)}"}, nproc, timeout)
        if outcome.returncode != 0 or outcome.final is None:
            say(f"FAIL run: {script.name} exited {outcome.returncode} without a score:")
            say(outcome.tail())
            return False
        outcomes.append(outcome)
    a, b = (o.final_line() for o in outcomes)
    if a != b:
        say(f"FAIL run: the original ends on `{a}` but the packed file on `{b}`")
        return False
    say(f"PASS run: both reached `{a}`")
    return True
