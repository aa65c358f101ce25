"""Will this run work, fit and be submittable? A checklist, then GO or NO-GO, in minutes.

Run it where you will run train_gpt.py, with the same environment variables and ranks:

  PRESET=pr1855 python tools/preflight.py --nproc-per-node 8 --json preflight.json
  PRESET=pr1855 torchrun --standalone --nproc_per_node=8 tools/preflight.py   (the same, launched
               by you: the verdict then comes above torchrun's report of a NO-GO)
  python tools/preflight.py          (one process: the all-reduce check is skipped)

It imports train_gpt.py and runs the run's own code (configure, load_data, build_network, the
Trainer's warm-up and steps, warm_up_ttt, eval_ttt, counted_code_bytes) on the run's settings:

  environment  torch, CUDA and driver versions; the GPUs against the track (8xH100); the
               attention kernel that will run; lrzip, brotli, python-minifier; free disk
  data         shard headers and sizes (hashes where the dataset records them), tokenizer,
               byte sidecars, validation documents in the training shards (data/check_overlap.py)
  comm         an all-reduce of the run's gradient size (NCCL, gloo on CPU): its bus bandwidth;
               with several nodes, that every node joined
  network      every training shape (loops on/off, each TRAIN_SEQ_SCHEDULE stage) compiled before
               the clock, no recompile after, ms/step of each, peak memory; projected steps
  evaluation   the TTT and n-gram graphs compiled; projected seconds of the evaluations
  code         the code bytes the submission counts, beside the record's cap margin

Each check prints one line (PASS, WARN, FAIL or SKIP, with its numbers); then `GO` or `NO-GO`
and, for a NO-GO, one line per thing to fix. --json writes every number. Checks that need CUDA
say `SKIP: no GPU` on a CPU, where the rest run at the (tiny) shape the environment gives.

It writes nothing the run reads, except DATA_PATH/overlap_checked.json (not with --no-record):
the overlap check's result, which train_gpt.py only copies into one log line (docs/preflight.md).
Exit codes: 0 GO, 1 NO-GO, 2 bad arguments, 3 the preflight itself stopped (its deadline).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import datetime
import hashlib
import importlib.util
import itertools
import json
import math
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GROUPS = ("environment", "data", "comm", "network", "evaluation", "code")
TRACK_GPUS, TRACK_SECONDS, EVAL_SECONDS, CAP = 8, 600.0, 600.0, 16_000_000
MEMORY_WARN, MEMORY_FAIL = 0.90, 0.97  # peak reserved over the GPU's memory
BUS_WARN_GBS = 100.0  # an 8-GPU NVLink node all-reduces far faster; below: PCIe or a bad link
# The records each preset reproduces, from their logs (docs/frontier.md): the largest artifact of
# the seeds, its counted code, the fewest steps, ms/step (mean; #1855 also by phase), the slowest
# TTT evaluation.
RECORDS = {
    "pr1855": dict(
        pr="#1855",
        artifact=15_907_550,
        code=31_999,
        steps=4917,
        ms=121.7,
        ms_plain=96.0,
        ms_looped=141.0,
        eval_s=508.8,
    ),
    "pr2014": dict(
        pr="#2014", artifact=15_984_387, code=38_134, steps=4882, ms=122.0, eval_s=572.4
    ),
    "pr2135": dict(
        pr="#2135", artifact=15_947_490, code=37_155, steps=4983, ms=120.07, eval_s=567.1
    ),
}
RECORDS["frontier"] = RECORDS["pr2135"]


# -----------------------------
# THE CHECKLIST
# -----------------------------


@dataclasses.dataclass
class Check:
    name: str
    status: str  # PASS, WARN, FAIL, SKIP
    what: str
    fix: str = ""
    numbers: dict = dataclasses.field(default_factory=dict)

    def line(self) -> str:
        fix = f"; fix: {self.fix}" if self.fix and self.status in ("FAIL", "WARN") else ""
        return f"{self.status:<4} {self.name}: {self.what}{fix}"


class Checklist:
    """The checks in order; rank 0 prints each as it is made."""

    def __init__(self, speak: bool):
        self.checks: list[Check] = []
        self.speak = speak
        self.phase = "start-up"
        self.cpu = False  # no GPU: the verdict says so

    def add(self, name, status, what, fix="", **numbers) -> Check:
        check = Check(name, status, what, fix, numbers)
        self.checks.append(check)
        if self.speak:
            print(check.line(), flush=True)
        return check

    def passed(self, name, what, **numbers):
        return self.add(name, "PASS", what, **numbers)

    def warn(self, name, what, fix, **numbers):
        return self.add(name, "WARN", what, fix, **numbers)

    def fail(self, name, what, fix, **numbers):
        return self.add(name, "FAIL", what, fix, **numbers)

    def skip(self, name, what, **numbers):
        return self.add(name, "SKIP", what, **numbers)

    def verdict(self) -> str:
        """GO or NO-GO, with what was not checked: the checks skipped (on a CPU: those that need
        a GPU among them) and the groups --skip left out."""
        word = "NO-GO" if any(c.status == "FAIL" for c in self.checks) else "GO"
        skipped = sum(c.status == "SKIP" and c.name != "skipped" for c in self.checks)
        groups = [g for c in self.checks if c.name == "skipped" for g in c.numbers["groups"]]
        parts = []
        if skipped:
            where = "CPU: " if self.cpu else ""
            parts.append(f"{where}{skipped} {'check' if skipped == 1 else 'checks'} skipped")
        if groups:
            parts.append(f"groups not run: {','.join(groups)}")
        return f"{word} ({'; '.join(parts)})" if parts else word

    def summary(self) -> list[str]:
        lines = [self.verdict()]
        lines += [f"  fix {c.name}: {c.fix}" for c in self.checks if c.status == "FAIL"]
        return lines

    def as_json(self) -> dict:
        return {
            "verdict": self.verdict(),
            "checks": [dataclasses.asdict(c) for c in self.checks],
            "numbers": {f"{c.name}.{k}": v for c in self.checks for k, v in c.numbers.items()},
        }


@contextlib.contextmanager
def guarded(cl: Checklist, name: str):
    """A check's unexpected error is its FAIL, not the preflight's end."""
    cl.phase = name
    try:
        yield
    except Exception as e:  # the others still run: the user sees every problem at once
        cl.fail(name, f"stopped with {type(e).__name__}: {e}", "see the message (a bug? report it)")


def watchdog(cl: Checklist, seconds: float) -> threading.Timer:
    """A preflight that waits too long (a rank stuck on another's collective) says where."""

    def expire() -> None:
        print(
            f"NO-GO: the preflight did not finish in {seconds:.0f} s (in: {cl.phase}; a rank "
            f"waiting on another?)",
            file=sys.stderr,
            flush=True,
        )
        os._exit(3)

    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    timer.start()
    return timer


# -----------------------------
# SETTINGS AND THE RUNTIME
# -----------------------------


class RunScriptError(Exception):
    """--script names a file the preflight cannot stand in for: `fix` says what to do."""

    def __init__(self, what: str, fix: str):
        super().__init__(what)
        self.fix = fix


def script_settings(cl: Checklist, tg, script: Path, world: int):
    """The settings `script` (one `records/submission.py specialize` wrote from this repository's
    train_gpt.py) runs under this environment: its own from_env, so its refusals are the run's.
    The preflight then runs the readable script's code on them: the specialised script is that
    code with the other settings' parts removed."""
    from records.golf import specialize

    rebuild = "write it again: python records/submission.py specialize --preset NAME -o FILE"
    try:
        text = script.read_text(encoding="utf-8")
    except OSError as e:
        what = f"--script {script}: {e.strerror or e}"
        raise RunScriptError(what, "name the script the runs will run") from None
    if not specialize.is_specialised_script(text):
        what = f"--script {script}: not a script `records/submission.py specialize` wrote"
        fix = "leave --script out for the readable train_gpt.py, or " + rebuild
        raise RunScriptError(what, fix)
    readable = hashlib.sha256(Path(tg.__file__).read_bytes()).hexdigest()
    if f"sha256: {readable})" not in text[:3000]:  # (its docstring names it)
        what = f"--script {script} was made from another train_gpt.py than {tg.__file__}"
        raise RunScriptError(what, rebuild + " (with this train_gpt.py)")
    settings = specialize.load_module(script).Hyperparameters.from_env(os.environ, world)
    cl.passed("script", f"{script}: specialised from this train_gpt.py, takes this environment")
    return settings


def check_settings(cl: Checklist, tg, script: Path | None = None):
    world = int(os.environ.get("WORLD_SIZE", "1"))
    try:
        if script is None:
            cfg = tg.Hyperparameters.from_env(os.environ, world)
        else:  # its own refusals; then the readable script runs the same values
            cfg = tg.Hyperparameters(**dataclasses.asdict(script_settings(cl, tg, script, world)))
    except ValueError as e:  # (train_gpt.ConfigError, or the specialised script's own)
        cl.fail("settings", str(e), "change the variable it names (train_gpt.py --help)")
        return None
    except RunScriptError as e:
        cl.fail("script", str(e), e.fix)
        return None
    preset = f"PRESET={cfg.preset}" if cfg.preset else "no PRESET"
    cl.passed("settings", f"{preset}, WORLD_SIZE={world}", preset=cfg.preset, world_size=world)
    check_variables(cl, tg)
    check_record_settings(cl, cfg)
    return cfg


def check_record_settings(cl: Checklist, cfg) -> None:
    """Settings the run accepts but a record folder of its logs would not: records/submission.py
    check's rules on the 10-minute track (a whole validation split, training within 600 s)."""
    from records.golf.rules import TRAIN_LIMIT_MS

    limit_s = TRAIN_LIMIT_MS / 1000
    refused = []
    if cfg.max_val_tokens > 0:
        refused.append(
            f"MAX_VAL_TOKENS={cfg.max_val_tokens} scores a slice of the validation split "
            f"(check's val_split rule FAILs its logs)"
        )
    if not 0 < cfg.max_wallclock_seconds <= limit_s:
        refused.append(
            f"MAX_WALLCLOCK_SECONDS={cfg.max_wallclock_seconds:g}: training is not capped at "
            f"{limit_s:.0f} s (check's train_time rule FAILs a log over it)"
        )
    if refused:
        fix = "unset them for a run you will submit to the 10-minute track (or use non_record_16mb)"
        cl.warn("record", "; ".join(refused), fix, refused=len(refused))
    else:
        cl.passed("record", "nothing here that check refuses on the 10-minute track", refused=0)


def check_variables(cl: Checklist, tg) -> None:
    """What the run itself would warn about: a variable that looks like one of the script's but
    is not (NUM_LAYER), which the run ignores."""
    warnings = [w.removeprefix("WARNING: ") for w in tg.misspelt_variables(os.environ)]
    if warnings:
        names = [w.split()[0] for w in warnings]
        fix = "correct or unset it: the run ignores it and trains with the default"
        if any(name.startswith("GUARD_") for name in names):  # the run's guard is a tool now
            fix += "; a guard: python tools/guard.py --reference LOG -- <the training command>"
        cl.warn("variables", "; ".join(warnings), fix, unknown=names)
    else:
        cl.passed("variables", "none that looks like the script's but is not")


def needs_lrzip(tg, cfg) -> bool:
    return tg.COMPRESSORS[cfg.compressor].binary == "lrzip"


def reach_master() -> str:
    """Another node's rank: MASTER_ADDR:MASTER_PORT answers (else the group never forms)."""
    addr, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
    if not addr or not port or os.environ.get("GROUP_RANK", "0") == "0":
        return ""
    try:
        socket.create_connection((addr, int(port)), timeout=10).close()
    except OSError as e:
        return f"MASTER_ADDR={addr} MASTER_PORT={port} unreachable from {socket.gethostname()}: {e}"
    return ""


def start_runtime(cl: Checklist, tg, cfg):
    """train_gpt.configure(): the device and the process group, as the run makes them. It
    refuses a per-group COMPRESSOR without lrzip; the lrzip check reports that, so the
    runtime is made without it and the other checks still run."""
    if problem := reach_master():
        cl.fail("nodes", problem, "open the port, or fix MASTER_ADDR/MASTER_PORT")
        return None
    saved = {name: os.environ.get(name) for name in ("COMPRESSOR", "ATTENTION_BACKEND")}
    if needs_lrzip(tg, cfg) and not shutil.which("lrzip"):
        os.environ["COMPRESSOR"] = "brotli" if importlib.util.find_spec("brotli") else "zlib"
    if cfg.preset and cfg.attention_backend == "auto":  # a missing FlashAttention-3 is the
        os.environ["ATTENTION_BACKEND"] = "sdpa"  # attention check's to report, not a stop
    try:
        return tg.configure()[1]
    except tg.ConfigError as e:
        cl.fail("runtime", str(e), "change the variable it names")
    except (RuntimeError, ValueError) as e:  # the process group did not form
        cl.fail("runtime", f"{type(e).__name__}: {e}", "check the launcher and the GPUs")
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    return None


def gather(rt, value) -> list:
    """Every rank's value (one process: [value])."""
    import torch.distributed as dist

    if not rt.distributed:
        return [value]
    out = [None] * rt.world_size
    dist.all_gather_object(out, value)
    return out


# -----------------------------
# ENVIRONMENT
# -----------------------------


def driver_version() -> str:
    try:
        query = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
        out = subprocess.run(query, capture_output=True, text=True, timeout=30).stdout
        return out.split("\n")[0].strip() or "unknown"
    except (OSError, subprocess.TimeoutExpired):
        return "none (no nvidia-smi)"


def check_versions(cl: Checklist, tg, rt) -> None:
    import torch

    cuda, driver = torch.version.cuda or "none", driver_version() if rt.cuda else "none"
    what = f"Python {sys.version.split()[0]}, torch {torch.__version__}, CUDA {cuda}"
    numbers = dict(torch=torch.__version__, cuda=cuda, driver=driver)
    major, minor = (int(x) for x in torch.__version__.split(".")[:2])
    if (major, minor) < (2, 5):
        cl.fail("versions", what, "torch >= 2.5 (requirements.txt)", **numbers)
    else:
        cl.passed("versions", f"{what}, driver {driver} (the records ran 2.9.1+cu128)", **numbers)


def check_gpus(cl: Checklist, tg, rt) -> None:
    import torch

    if not rt.cuda:
        cl.skip(
            "gpus",
            "no GPU: a CPU run is for trying things; the 10-minute track is timed on "
            f"{TRACK_GPUS}xH100 (a CPU log belongs to non_record_16mb)",
        )
        return
    props = torch.cuda.get_device_properties(rt.device)
    nodes = max(rt.world_size // int(os.environ.get("LOCAL_WORLD_SIZE", rt.world_size)), 1)
    names = gather(rt, props.name)
    gib = props.total_memory / 2**30
    numbers = dict(name=props.name, memory_gib=round(gib, 1), count=rt.world_size, nodes=nodes)
    what = f"{rt.world_size}x{props.name} ({gib:.0f} GiB each, {nodes} node(s))"
    if rt.world_size == TRACK_GPUS and all("H100" in n for n in names):
        cl.passed("gpus", f"{what}: the 10-minute track's hardware", **numbers)
    else:
        cl.warn(
            "gpus",
            f"{what}: the 10-minute track is timed on {TRACK_GPUS}xH100 SXM; this "
            "run's log belongs to non_record_16mb, and its steps in 600 s differ from the "
            "records'",
            f"run on {TRACK_GPUS}xH100 SXM to submit a record",
            **numbers,
        )


def check_attention(cl: Checklist, tg, cfg, rt) -> None:
    """select_attention as the run calls it: a preset on a GPU without FlashAttention-3 fails
    with the run's own start-up line."""
    try:
        name = tg.select_attention(cfg.attention_backend, rt.device, cfg.preset).name
    except tg.ConfigError as e:
        fix = (
            "bash scripts/setup.sh on this pod installs the kernel; or the ATTENTION_BACKEND named"
        )
        cl.fail("attention", str(e), fix)
        return
    cl.passed("attention", name, kernel=name)


def check_tools(cl: Checklist, tg, cfg) -> None:
    """The programs and packages the artifact's formats need (train_gpt's QUANTIZERS and
    COMPRESSORS rows), and python-minifier where the records' code count minifies."""
    lrzip = shutil.which("lrzip")
    if not needs_lrzip(tg, cfg):
        cl.passed("lrzip", f"not needed (COMPRESSOR={cfg.compressor})", path=lrzip)
    elif lrzip:
        cl.passed("lrzip", f"{lrzip} (COMPRESSOR={cfg.compressor})", path=lrzip)
    else:
        cl.fail(
            "lrzip",
            f"COMPRESSOR={cfg.compressor} needs lrzip, not on PATH",
            "install lrzip (bash scripts/setup.sh, or apt-get install lrzip)",
        )
    quantizer, compressor = tg.QUANTIZERS[cfg.quantizer], tg.COMPRESSORS[cfg.compressor]
    if importlib.util.find_spec("brotli"):
        cl.passed("brotli", "installed")
    elif "brotli" in (quantizer.module, compressor.module):
        cl.fail("brotli", "not installed", "pip install brotli (requirements.txt)")
    else:
        cl.warn("brotli", "not installed (this run does not need it)", "pip install brotli")
    if importlib.util.find_spec("python_minifier"):
        cl.passed("python-minifier", "installed")
    elif quantizer.records:
        cl.fail(
            "python-minifier",
            "not installed: QUANTIZER=gptq counts the code unminified, thousands of bytes more",
            "pip install python-minifier",
        )
    else:
        cl.passed("python-minifier", "not needed (QUANTIZER=int8 counts the source as it is)")


def check_disk(cl: Checklist, cfg, params: int) -> None:
    """Room for the run's files: final_model.pt (fp32), the artifact, logs, checkpoints."""
    free = shutil.disk_usage(".").free
    need = 4 * params + CAP + (64 << 20)
    if cfg.checkpoint_every:
        need += 3 * 12 * params  # the weights and Adam/Muon states of a few checkpoints
    numbers = dict(free_bytes=free, need_bytes=need)
    what = f"{free / 2**30:.1f} GiB free here, the run writes about {need / 2**30:.2f} GiB"
    if free < need:
        cl.fail("disk", what, "free disk space in the run's folder", **numbers)
    elif free < 2 * need:
        cl.warn(
            "disk",
            what,
            "free more: the previous run's final_model.* files are kept too",
            **numbers,
        )
    else:
        cl.passed("disk", what, **numbers)


# -----------------------------
# DATA
# -----------------------------


def check_shards(cl: Checklist, tg, cfg) -> bool:
    try:
        train = tg.TrainShards(cfg.train_files, cfg.vocab_size)
        val = [tg.read_shard_header(f) for f in tg.list_shards(cfg.val_files)]
    except tg.DataError as e:
        what = str(e)
        fix = "download or rebuild that file (docs/data.md)"
        if what.startswith("no files match"):  # no dataset there at all, not one bad file
            fix = "set DATA_PATH to a dataset folder, or download or build one (docs/data.md)"
        cl.fail("shards", what, fix)
        return False
    numbers = dict(
        train_shards=len(train.files),
        train_tokens=sum(train.sizes),
        val_shards=len(val),
        val_tokens=sum(val),
    )
    cl.passed(
        "shards",
        f"{len(train.files)} train shards ({sum(train.sizes):,} tokens), "
        f"{len(val)} val ({sum(val):,} tokens): headers and sizes",
        **numbers,
    )
    return True


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def check_hashes(cl: Checklist, cfg, rt) -> None:
    """build_info.json (data/build_local_dataset.py) lists each shard's sha256; the published
    manifests list none. Each rank hashes its share."""
    info = Path(cfg.data_path) / "build_info.json"
    if not info.is_file():
        cl.skip(
            "hashes",
            "no hashes to check: the published manifests list none (headers and "
            "sizes are checked); a built dataset's build_info.json would",
        )
        return
    shards = json.loads(info.read_text()).get("shards", [])
    mine = [s for i, s in enumerate(shards) if i % rt.world_size == rt.rank]
    bad = [
        s["file"]
        for s in mine
        if not (Path(cfg.data_path) / s["file"]).is_file()
        or sha256(Path(cfg.data_path) / s["file"]) != s["sha256"]
    ]
    bad = sorted(itertools.chain(*gather(rt, bad)))
    if bad:
        cl.warn(
            "hashes",
            f"{len(bad)} of {len(shards)} shards differ from build_info.json: {', '.join(bad[:5])}",
            "rebuild the dataset (or it was edited on purpose)",
            mismatched=bad,
        )
    else:
        cl.passed("hashes", f"{len(shards)} shards match build_info.json's sha256")


def check_sidecars(cl: Checklist, cfg) -> None:
    """CaseOps pieces do not spell the text's bytes: its BPB needs the byte sidecars."""
    found = sorted(Path(cfg.data_path).glob("fineweb_val_bytes_*.bin"))
    names = f"{cfg.data_path} {cfg.tokenizer_path}".lower()
    needed = "caseops" in names or "lossless_caps" in names
    if found:
        cl.passed("sidecars", f"{len(found)} val byte sidecars: the BPB counts their bytes")
    elif needed:
        cl.fail(
            "sidecars",
            "a CaseOps dataset without fineweb_val_bytes_*.bin: its BPB would "
            "count the tokenizer's bytes, not the text's",
            "download them: data/download_fineweb.py fetches what the manifest names",
        )
    else:
        cl.passed("sidecars", "not needed (bytes from the tokenizer's pieces)")


def load_run_data(cl: Checklist, tg, cfg, rt, lines: list):
    """train_gpt.load_data: the tokenizer matches the data, the validation split and its
    sidecars, the sliding windows and the TTT plan, as the run builds them."""
    try:
        data = tg.load_data(cfg, rt, lines.append)
    except (tg.DataError, tg.ConfigError) as e:
        where = "tokenizer" if "TOKENIZER" in str(e) or "tokeniz" in str(e) else "data"
        cl.fail(where, str(e), "use the tokenizer and data that belong together (docs/data.md)")
        return None
    val = data[0]
    cl.passed(
        "tokenizer",
        f"{Path(cfg.tokenizer_path).name} matches the data "
        f"(VOCAB_SIZE={cfg.vocab_size}); val targets {val.target_tokens:,}, bytes from "
        f"{val.bytes_from}",
        val_targets=val.target_tokens,
    )
    return data


def check_overlap(cl: Checklist, tg, cfg, rt, args) -> None:
    """data/check_overlap.py, each rank its share of the train shards; the record reused when
    it describes these shards (unless --recheck-overlap)."""
    from data import check_overlap as co
    from records.golf.rules import overlap_status

    line = tg.overlap_line(cfg)
    if args.recheck_overlap or not line.startswith("data_overlap: ") or "not checked" in line:
        t0 = time.perf_counter()
        train, valf = co.dataset_files(cfg.data_path)
        val = co.index_validation(valf, 1)
        parts = [
            co.check_shard(train, i, val, 1) for i in range(rt.rank, len(train), rt.world_size)
        ]
        parts = sorted(itertools.chain(*gather(rt, parts)), key=lambda r: r.name)
        report = co.merge(cfg.data_path, val, parts, train, valf, 1, time.perf_counter() - t0)
        if rt.rank == 0 and not args.no_record:
            with contextlib.suppress(OSError):  # a read-only folder: the log says "not checked"
                co.write_record(report)
        found, total, examples = report.overlapping, report.val_documents, report.examples
        how = f"checked now in {report.seconds:.1f}s"
    else:
        record = json.loads((Path(cfg.data_path) / co.RECORD).read_text())
        found, total, examples = record["overlapping"], record["val_documents"], record["examples"]
        how = f"recorded {record['checked']}"
    numbers = dict(overlapping=found, val_documents=total, examples=examples)
    what = f"{found} of {total} validation documents in the training shards ({how})"
    named = "; ".join(f"{m['shard']} token {m['offset']}" for m in examples[:3])
    fix = f"train on shards without them ({named}; docs/data.md says how to clean them)"
    status = overlap_status(found, total)  # records/golf/rules.py: the rule `check` judges by too
    if status == "FAIL":
        cl.fail("overlap", what, fix, **numbers)
    elif status == "WARN":
        cl.warn("overlap", what, fix, **numbers)
    else:
        cl.passed("overlap", what, **numbers)


# -----------------------------
# COMMUNICATION
# -----------------------------


def bus_bandwidth(nbytes: int, seconds: float, world: int) -> float:
    """GB/s an all-reduce moves per rank (NCCL's busbw: algbw x 2(n-1)/n)."""
    return nbytes / seconds * 2 * (world - 1) / world / 1e9


def check_allreduce(cl: Checklist, rt, params: int, repeats: int = 5) -> None:
    import torch
    import torch.distributed as dist

    if not rt.distributed or rt.world_size == 1:
        cl.skip("allreduce", "one process: nothing to all-reduce (run it under torchrun)")
        return
    grads = torch.ones(params, dtype=torch.float32, device=rt.device)  # the DDP gradients' size
    dist.all_reduce(grads)  # the first sets up the communicators
    rt.synchronize()
    t0 = time.perf_counter()
    for _ in range(repeats):
        dist.all_reduce(grads)
    rt.synchronize()
    seconds = (time.perf_counter() - t0) / repeats
    busbw = bus_bandwidth(grads.numel() * 4, seconds, rt.world_size)
    hosts = len(set(gather(rt, socket.gethostname())))
    backend = dist.get_backend()
    numbers = dict(
        bytes=grads.numel() * 4,
        ms=round(seconds * 1e3, 3),
        busbw_gbs=round(busbw, 2),
        backend=backend,
        hosts=hosts,
    )
    what = (
        f"{backend} all-reduce of {grads.numel() * 4 / 2**20:.1f} MiB over {rt.world_size} "
        f"ranks on {hosts} host(s): {seconds * 1e3:.1f} ms, bus {busbw:.1f} GB/s"
    )
    nodes = rt.world_size // int(os.environ.get("LOCAL_WORLD_SIZE", rt.world_size))
    if hosts != nodes:  # NNODES (torchrun --nnodes) against the hosts that joined
        fix = "give torchrun the same --nnodes and --nproc_per_node on every node"
        cl.warn("allreduce", f"{what}; expected {nodes} node(s)", fix, **numbers)
    elif rt.cuda and hosts == 1 and busbw < BUS_WARN_GBS:
        cl.warn(
            "allreduce",
            what,
            "check the GPUs' links (nvidia-smi topo -m): NVLink expected",
            **numbers,
        )
    else:
        cl.passed("allreduce", what, **numbers)
    del grads


# -----------------------------
# THE NETWORK: SHAPES, STEPS, MEMORY
# -----------------------------


def phase_shares(tg, cfg) -> dict[tuple[int, bool], float]:
    """(seq_len, looping) -> the share of the training time it runs: TRAIN_SEQ_SCHEDULE's
    stages (the first whose p >= progress) and the loops from ENABLE_LOOPING_AT on."""
    stages = cfg.seq_stages
    loop_at = cfg.enable_looping_at if cfg.num_loops else math.inf
    bounds = sorted({0.0, *(p for p, _ in stages), *([loop_at] * (0 < loop_at < 1))})
    shares: dict[tuple[int, bool], float] = {}
    for a, b in itertools.pairwise(bounds):
        length = next(n for p, n in stages if b <= p)
        key = (length, a >= loop_at)
        shares[key] = shares.get(key, 0.0) + b - a
    return shares


def projected_steps(tg, cfg, ms: dict) -> float:
    """Steps within the cap (less GPTQ_RESERVE_SECONDS) at the measured ms/step of each phase,
    at most ITERATIONS. No cap: ITERATIONS."""
    if cfg.max_wallclock_seconds <= 0:
        return float(cfg.iterations)
    budget = 1000.0 * (cfg.max_wallclock_seconds - cfg.gptq_reserve_seconds)
    steps = sum(share * budget / ms[key] for key, share in phase_shares(tg, cfg).items())
    return min(steps, float(cfg.iterations))


def graphs() -> int:
    import torch

    return int(torch._dynamo.utils.counters["stats"]["unique_graphs"])


def time_steps(trainer, rt, steps: int) -> float:
    """ms per training step (forward, backward, optimizer) at the trainer's current shape."""
    trainer.open_loader()
    trainer.forward_backward()  # untimed: the loader's first batches, any lazy state
    trainer.update()
    rt.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        trainer.forward_backward()
        trainer.update()
    rt.synchronize()
    trainer.close()
    return 1000.0 * (time.perf_counter() - t0) / steps


def record_ms(record: dict, looping: bool, cfg) -> str:
    """The record's ms/step beside ours: #1855's by phase, else its mean."""
    if "ms_plain" in record and not cfg.train_seq_schedule:
        ms = record["ms_looped"] if looping else record["ms_plain"]
        return f" ({record['pr']}: {ms:.0f} ms {'looped' if looping else 'plain'}, 8xH100)"
    return f" ({record['pr']}: {record['ms']} ms mean over its run, 8xH100)"


def check_shapes(cl: Checklist, tg, cfg, rt, net, data, args, lines: list) -> None:
    """The run's warm-up (every shape compiled before the clock), then STEPS timed steps of each
    shape: no graph may compile after the warm-up."""
    import torch

    record = RECORDS.get(cfg.preset)
    with tg.Trainer(cfg, rt, net, lines.append) as trainer:
        shapes = trainer.compile_shapes()
        if rt.cuda:  # the run's peak: its warm-up included
            torch.cuda.reset_peak_memory_stats(rt.device)
        before, t0 = graphs(), time.perf_counter()
        trainer.warm_up_and_restore()
        rt.synchronize()
        compile_s, compiled = time.perf_counter() - t0, graphs() - before
        names = ", ".join(f"{n}x{'loop' if looped else 'plain'}" for n, looped in shapes)
        numbers = dict(seconds=round(compile_s, 1), graphs=compiled, shapes=names)
        if not rt.cuda:
            cl.skip(
                "compile",
                f"no GPU (no torch.compile on the CPU); the warm-up of {names} "
                f"took {compile_s:.1f}s",
                **numbers,
            )
        else:
            cl.passed(
                "compile",
                f"{compiled} graphs for {names} in {compile_s:.1f}s, before "
                "the clock (WARMUP_STEPS each)",
                **numbers,
            )
        ms, after = {}, graphs()
        for trainer.seq_len, net.base.looping in shapes:
            key = (trainer.seq_len, net.base.looping)
            ms[key] = max(gather(rt, time_steps(trainer, rt, args.steps)))  # the slowest rank's
            beside = record_ms(record, key[1], cfg) if record and rt.cuda else ""
            where = "" if rt.cuda else " (CPU at this shape: not the GPU's)"
            cl.passed(
                f"steps {key[0]}x{'loop' if key[1] else 'plain'}",
                f"{ms[key]:.1f} ms/step{where}{beside}",
                ms=round(ms[key], 2),
            )
        net.base.looping, trainer.seq_len = False, trainer.stages[0][1]
        recompiled = graphs() - after
    if not rt.cuda:
        cl.skip("recompiles", "no GPU (no torch.compile on the CPU)")
    elif recompiled:
        fix = (
            "WARMUP_STEPS > 0: the warm-up compiles before the clock"
            if not cfg.warmup_steps
            else "report it: a shape the warm-up misses (Trainer.compile_shapes)"
        )
        what = f"{recompiled} graphs compiled after the warm-up: inside the clock"
        cl.fail("recompiles", what, fix, graphs=recompiled)
    else:
        cl.passed("recompiles", "none after the warm-up", graphs=0)
    check_memory(cl, rt)
    check_projection(cl, tg, cfg, ms, record if rt.cuda else None)  # a CPU's: no comparison


def check_memory(cl: Checklist, rt) -> None:
    import torch

    if not rt.cuda:
        cl.skip("memory", "no GPU")
        return
    total = torch.cuda.get_device_properties(rt.device).total_memory
    peak = max(gather(rt, torch.cuda.max_memory_reserved(rt.device)))
    share = peak / total
    numbers = dict(peak_mib=peak >> 20, total_mib=total >> 20, share=round(share, 3))
    what = f"peak {peak >> 20:,} of {total >> 20:,} MiB reserved ({share:.0%}) while training"
    if share > MEMORY_FAIL:
        cl.fail("memory", what, "a smaller TRAIN_BATCH_TOKENS per rank, or more GPUs", **numbers)
    elif share > MEMORY_WARN:
        cl.warn("memory", what, "little room: the TTT evaluation needs its own", **numbers)
    else:
        cl.passed("memory", what, **numbers)


def check_projection(cl: Checklist, tg, cfg, ms: dict, record: dict | None) -> None:
    steps = projected_steps(tg, cfg, ms)
    shares = ", ".join(
        f"{n}x{'loop' if lp else 'plain'} {s:.0%}" for (n, lp), s in phase_shares(tg, cfg).items()
    )
    cap = cfg.max_wallclock_seconds
    what = (
        f"projection: {steps:,.0f} steps in {cap:.0f}s ({shares})"
        if cap > 0
        else f"projection: no cap: ITERATIONS={cfg.iterations}"
    )
    numbers = dict(projected_steps=round(steps), record_steps=record and record["steps"])
    if record and steps < 0.95 * record["steps"]:
        cl.warn(
            "train_steps",
            f"{what}; {record['pr']} made {record['steps']:,}",
            "faster GPUs or kernels (attention, compile), or expect a worse score",
            **numbers,
        )
    else:
        cl.passed(
            "train_steps",
            what + (f"; {record['pr']} made {record['steps']:,}" if record else ""),
            **numbers,
        )


# -----------------------------
# EVALUATION
# -----------------------------


def first_of(obj, n: int, *names: str):
    """A copy of a ValidationSet/SlidingWindows/TTTPlan holding the first n of each list named."""
    part = copy.copy(obj)
    for name in names:
        items = getattr(obj, name)
        setattr(part, name, None if items is None else items[:n])
    return part


def timed(rt, work) -> float:
    rt.synchronize()
    t0 = time.perf_counter()
    work()
    rt.synchronize()
    return time.perf_counter() - t0


def project(rt, evaluate, obj, names: tuple, total: int, n: int) -> float:
    """Seconds of a whole evaluation from its first n batches, timed after one batch (which
    compiles); every rank runs both, one without batches too (the sums are all-reduced)."""
    evaluate(first_of(obj, 1, *names))
    n = min(n, total)
    seconds = timed(rt, lambda: evaluate(first_of(obj, n, *names)))
    return seconds * total / n if n else 0.0


def project_val(tg, cfg, rt, model, val, n: int) -> float:
    evaluate = lambda part: tg.eval_val(cfg, rt, model, part)  # noqa: E731
    return project(rt, evaluate, val, ("spans", "documents"), len(val.spans), n)


def project_sliding(tg, cfg, rt, model, windows, n: int) -> float:
    evaluate = lambda part: tg.eval_sliding(cfg, rt, model, part)  # noqa: E731
    return project(rt, evaluate, windows, ("batches",), len(windows.batches), n)


def ttt_cost(batches) -> int:
    """A batch's forward work: columns x live rows over its chunk steps (TTTPlan's measure)."""
    return sum(width * (b.table.size(1) - lo) for b in batches for width, _, lo in b.steps)


def project_ttt(tg, cfg, rt, model, plan, n: int, lines: list) -> tuple[float, float]:
    """(seconds eval_ttt would take, seconds of the n-gram hints): this rank's first n batches
    scored (no phase), scaled by the work left; each phase's SGD steps by its first step's."""
    hints_s = 0.0
    if cfg.ngram_tilt_enabled:
        hints_s = timed(
            rt,
            lambda: setattr(plan, "hints", tg.ngram_tilt_hints(cfg, rt.device, plan, lines.append)),
        )
    work = plan.work
    n = min(n, len(work))
    part = first_of(plan, n, "work")
    part.phases, part.used = [], False
    seconds = timed(rt, lambda: tg.eval_ttt(cfg, rt, model, part, lines.append))
    scale = ttt_cost(work) / max(ttt_cost(work[:n]), 1)
    chunks = seconds * scale if n else 0.0
    phase_s = 0.0
    base = tg.uncompiled(model)
    for _, steps in plan.phases[:1]:  # one phase's first step, timed, times every phase's steps
        if steps:
            one = timed(
                rt, lambda s=steps: tg.train_phase(cfg, rt, model, list(base.parameters()), s[:1])
            )
            phase_s = one * sum(len(s) for _, s in plan.phases)
    own = chunks + phase_s + (0.0 if cfg.ngram_hint_precompute_outside else hints_s)
    return max(gather(rt, own)), hints_s


TTT_COMPILE_WARN_S = 300.0  # the records' TTT warm-ups took 92-138 s (their logs)


def check_ttt_compile(cl: Checklist, tg, cfg, rt, model, plan, lines: list) -> None:
    """warm_up_ttt as the run calls it: every rank's graphs and seconds, and the peak memory of
    its largest chunk step (TTTPlan.warmup_shapes) and phase step beside training's. The graphs
    go to torch's on-disk caches, which the run then reads (its ttt_warmup line counts the
    hits)."""
    import torch

    if not rt.cuda:
        cl.skip("ttt_compile", "no GPU (no torch.compile on the CPU)")
        tg.warm_up_ttt(cfg, rt, model, plan, lines.append)
        return
    training_peak = torch.cuda.max_memory_allocated(rt.device)
    torch.cuda.reset_peak_memory_stats(rt.device)
    before, t0 = graphs(), time.perf_counter()
    tg.warm_up_ttt(cfg, rt, model, plan, lines.append)
    ranks = gather(rt, (graphs() - before, time.perf_counter() - t0))
    peak = max(gather(rt, torch.cuda.max_memory_allocated(rt.device)))
    expected = len(plan.warmup_shapes) + bool(plan.phases)
    counts, seconds = [g for g, _ in ranks], [t for _, t in ranks]
    numbers = dict(graphs=counts, seconds=[round(t, 1) for t in seconds], expected=expected)
    what = (
        f"{counts[0]} graphs (expected {expected}) in {max(seconds):.1f}s on the slowest rank, "
        f"{max(seconds) - min(seconds):.1f}s after the fastest, before the evaluation's timer"
    )
    if len(set(counts)) > 1 or counts[0] > expected:
        cl.fail("ttt_compile", what, "recompiles: rerun with TORCH_LOGS=recompiles", **numbers)
    elif max(seconds) > TTT_COMPILE_WARN_S:
        cl.warn("ttt_compile", what, "a slow compile: a warm inductor cache halves it", **numbers)
    else:
        cl.passed("ttt_compile", what, **numbers)
    total = torch.cuda.get_device_properties(rt.device).total_memory
    rows, cols = plan.warmup_shapes[0] if plan.warmup_shapes else (0, 0)
    what = (
        f"peak {peak >> 20:,} MiB allocated at TTT's largest step ({rows}x{cols} and a phase "
        f"step) beside {training_peak >> 20:,} MiB training, of {total >> 20:,} MiB"
    )
    numbers = dict(ttt_peak_mib=peak >> 20, training_peak_mib=training_peak >> 20)
    if peak > MEMORY_FAIL * total:
        cl.fail("ttt_memory", what, "a smaller TTT_BATCH_SIZE or TTT_EVAL_SEQ_LEN", **numbers)
    else:
        cl.passed("ttt_memory", what, **numbers)


def check_ttt_memory_plan(cl: Checklist, tg, cfg, plan) -> None:
    """The TTT plan's host and device bytes on this rank (benchmarks/ttt_schedule.py's count)."""
    from benchmarks.ttt_schedule import plan_memory

    memory = plan_memory(cfg, tg, plan)
    what = (
        f"host {memory['host_gb']} GB (A draws at most {memory['host_a_draws_gb']} GB), device "
        f"{memory['device_gb']} GB once placed, per rank"
    )
    cl.passed("ttt_plan_memory", what, **memory)


def check_evaluation(cl: Checklist, tg, cfg, rt, net, data, args, lines: list) -> None:
    """The evaluations the run ends with, projected from a few batches each; the scored one
    (TTT, else sliding, else plain) against the 600 s evaluation limit."""
    val, windows, plan = data
    model = net.compiled
    round_trip = tg.round_trip_label(cfg)
    projections = {round_trip: project_val(tg, cfg, rt, model, val, args.batches)}
    if windows is not None:
        projections["sliding_window"] = project_sliding(tg, cfg, rt, model, windows, args.batches)
    if plan is not None:
        check_ttt_memory_plan(cl, tg, cfg, plan)
        check_ttt_compile(cl, tg, cfg, rt, model, plan, lines)
        ttt_s, hints_s = project_ttt(tg, cfg, rt, model, plan, args.batches, lines)
        projections["quantized_ttt_phased"] = ttt_s
        if cfg.ngram_tilt_enabled:
            inside = "inside" if not cfg.ngram_hint_precompute_outside else "outside"
            cl.passed(
                "ngram_hints",
                f"{hints_s:.1f}s ({inside} the evaluation's timer)",
                seconds=round(hints_s, 2),
            )
    projections = {k: max(gather(rt, v)) for k, v in projections.items()}
    scored = list(projections)[-1]
    seconds, total = projections[scored], sum(projections.values())
    record = RECORDS.get(cfg.preset)
    beside = f"; {record['pr']}'s took {record['eval_s']}s" if record and rt.cuda else ""
    where = "" if rt.cuda else " (CPU at this shape)"
    what = (
        f"projection: {scored} {seconds:.1f}s of {EVAL_SECONDS:.0f}{where}, all evaluations "
        f"{total:.1f}s{beside}"
    )
    numbers = {f"{k}_s": round(v, 2) for k, v in projections.items()}
    if seconds > EVAL_SECONDS:
        cl.fail(
            "eval_time",
            what,
            "a faster evaluation (EVAL_BATCH_SEQS, TTT_BATCH_SIZE, fewer phases) or faster GPUs",
            **numbers,
        )
    elif total > EVAL_SECONDS:
        cl.warn(
            "eval_time", what, "leave the diagnostic evaluations out of the timed run", **numbers
        )
    else:
        cl.passed("eval_time", what, **numbers)


# -----------------------------
# CODE BYTES
# -----------------------------


def specialised_bytes(tg, cfg) -> int | None:
    """The counted bytes of the script the submission ships when records/golf's specialiser is
    there (specialize_script for the run's every value, then its record-packed file); None if
    it is absent or offers another interface."""
    with contextlib.suppress(Exception):
        from records.golf import specialize

        values = dataclasses.asdict(cfg)
        source = specialize.specialize_script(Path(tg.__file__), values=values)
        return len(specialize.counted(source))
    return None


def check_code(cl: Checklist, tg, cfg, lines: list, script: Path | None = None) -> None:
    counted, what = None, "the specialised, packed script"
    # (the script `specialize` writes states its count, the smallest at least its packing:
    # brotli moves it by up to about 100 B from this one, which counts the code alone)
    rule = "records/golf's specialiser; --script gives the written script's own"
    if script is None:
        counted = specialised_bytes(tg, cfg)
    if script is not None:  # (script_settings read it)
        from records.golf.specialize import stated_count

        text = script.read_text(encoding="utf-8")
        counted, what, rule = stated_count(text), str(script), "its packed form, as it states"
        if counted is None:  # a run that counts its source as it is (no GPTQ)
            counted, rule = len(text.encode("utf-8")), "as it is"
    elif counted is None:  # the readable script, counted as the run's log_code_size counts it
        what = "the readable train_gpt.py (no specialiser in records/golf)"
        code = Path(tg.__file__).read_bytes().decode("utf-8")
        if not tg.QUANTIZERS[cfg.quantizer].records:
            counted, rule = len(code.encode("utf-8")), "as it is"
        elif importlib.util.find_spec("brotli") is None:
            cl.skip("code_bytes", "brotli is not installed: cannot count the code (see brotli)")
            return
        else:
            counted, rule = tg.counted_code_bytes(code, lines.append), "minified+brotli+base85"
    record = RECORDS.get(cfg.preset)
    numbers = dict(code_bytes=counted, counted_as=rule, script=what)
    if record is None:
        cl.passed(
            "code_bytes",
            f"{counted:,} B counted ({rule}) of {what}; the weights' bytes "
            "are known after training",
            **numbers,
        )
        return
    total = record["artifact"] - record["code"] + counted
    numbers |= dict(record_artifact=record["artifact"], with_record_weights=total)
    what = (
        f"{counted:,} B counted ({rule}) of {what}; with {record['pr']}'s largest weights "
        f"({record['artifact'] - record['code']:,} B) the artifact would be {total:,} B, "
        f"{CAP - total:+,} B from the cap (the weights' size is known after training)"
    )
    if total > CAP:
        cl.fail("code_bytes", what, "a smaller script (records/golf's specialiser)", **numbers)
    elif CAP - total < 10_000:
        cl.warn(
            "code_bytes",
            what,
            "little room: a seed's weights vary by thousands of bytes",
            **numbers,
        )
    else:
        cl.passed("code_bytes", what, **numbers)


# -----------------------------
# MAIN
# -----------------------------


def run_checks(cl: Checklist, tg, args) -> None:
    skip = set(args.skip)
    cfg = check_settings(cl, tg, args.script)
    if cfg is None:
        return
    rt = start_runtime(cl, tg, cfg)
    if rt is None:
        return
    cl.speak, cl.cpu = rt.rank == 0, not rt.cuda
    lines: list[str] = []
    if "environment" not in skip:
        with guarded(cl, "versions"):
            check_versions(cl, tg, rt)
        with guarded(cl, "gpus"):
            check_gpus(cl, tg, rt)
        with guarded(cl, "attention"):
            check_attention(cl, tg, cfg, rt)
        check_tools(cl, tg, cfg)
    data = None
    if "data" not in skip:
        with guarded(cl, "data"):
            if check_shards(cl, tg, cfg):
                check_hashes(cl, cfg, rt)
                check_sidecars(cl, cfg)
                data = load_run_data(cl, tg, cfg, rt, lines)
                check_overlap(cl, tg, cfg, rt, args)
            else:
                cl.skip("overlap", "not checked: the shards did not read (see above)")
    net, params = None, 0
    if {"comm", "network", "evaluation"} - skip:  # the model: its size, its shapes
        with guarded(cl, "network"):
            net = tg.build_network(cfg, rt)
            params = sum(p.numel() for p in net.base.parameters())
    if "environment" not in skip:
        with guarded(cl, "disk"):
            check_disk(cl, cfg, params)
    if "comm" not in skip and net is not None:
        with guarded(cl, "allreduce"):
            check_allreduce(cl, rt, params)
    missing = "the data" if data is None else "the model" if net is None else ""
    for group, check in (("network", check_shapes), ("evaluation", check_evaluation)):
        if group in skip:
            continue
        if missing:  # never a silent pass: what was not checked, and why
            cl.skip(group, f"not checked: {missing} did not load (see above)")
            continue
        with guarded(cl, group):
            check(cl, tg, cfg, rt, net, data, args, lines)
    if "code" not in skip:
        with guarded(cl, "code_bytes"):
            check_code(cl, tg, cfg, lines, args.script)
    if skip:
        cl.skip("skipped", f"--skip {','.join(sorted(skip))}", groups=sorted(skip))
    if args.verbose and cl.speak:
        print("\n".join(f"  | {x}" for x in lines))


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Preflight for train_gpt.py: run it with the run's environment and ranks "
        "(PRESET=pr1855 python tools/preflight.py --nproc-per-node 8); it prints a checklist, GO "
        "or NO-GO, and what to fix, last. docs/preflight.md describes every check."
    )
    p.add_argument("--json", type=Path, help="write every check and number here (rank 0)")
    p.add_argument("--steps", type=int, default=5, help="timed training steps per shape (5)")
    p.add_argument(
        "--batches",
        type=int,
        default=3,
        help="evaluation batches timed per evaluation, to project its time (3)",
    )
    p.add_argument(
        "--skip",
        type=lambda s: [g for g in s.split(",") if g],
        default=[],
        help=f"groups not to check, comma-separated: {','.join(GROUPS)}",
    )
    p.add_argument(
        "--recheck-overlap",
        action="store_true",
        help="check the overlap again even where DATA_PATH's record covers the shards",
    )
    p.add_argument(
        "--no-record",
        action="store_true",
        help="do not write DATA_PATH/overlap_checked.json (the run's log line)",
    )
    p.add_argument(
        "--deadline",
        type=float,
        default=1200.0,
        help="seconds after which the preflight stops itself, saying where (1200)",
    )
    p.add_argument(
        "--script",
        type=Path,
        help="the script the runs will run, as `records/submission.py specialize` wrote it: its "
        "own refusals of this environment, and its code counted as it states",
    )
    p.add_argument("--verbose", action="store_true", help="also print train_gpt.py's own lines")
    p.add_argument(
        "--nproc-per-node",
        type=int,
        help="start N ranks under torchrun (--standalone) itself, then print the verdict and its "
        "fix lines last, after torchrun's own report; the exit status is the verdict's",
    )
    args = p.parse_args(argv)
    if args.nproc_per_node is not None and args.nproc_per_node < 1:
        p.error(f"--nproc-per-node {args.nproc_per_node}: expected >= 1")
    if args.nproc_per_node is not None and "RANK" in os.environ:
        p.error("--nproc-per-node: already under torchrun (RANK is set); drop one of the two")
    unknown = set(args.skip) - set(GROUPS)
    if unknown:
        p.error(f"--skip {','.join(sorted(unknown))}: expected some of {','.join(GROUPS)}")
    if args.steps < 1 or args.batches < 1:
        p.error("--steps and --batches: expected >= 1")
    return args


def written(path: Path) -> int | None:
    """When `path` was last written (ns), None if it is not there."""
    return path.stat().st_mtime_ns if path.exists() else None


def launch(args, argv: list[str]) -> int:
    """--nproc-per-node N: this script under torchrun with N ranks; then the verdict, read back
    from rank 0's --json, as the last lines on screen (torchrun reports a failed rank at length)."""
    import tempfile

    own = [a for a in argv if not a.startswith("--nproc-per-node")]
    if "--nproc-per-node" in argv:  # its value, given as a separate word
        at = argv.index("--nproc-per-node")
        own = argv[:at] + argv[at + 2 :]
    with tempfile.TemporaryDirectory(prefix="preflight.") as folder:
        report = args.json or Path(folder) / "preflight.json"
        if args.json is None:
            own += ["--json", str(report)]
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
        command += [f"--nproc_per_node={args.nproc_per_node}", str(Path(__file__)), *own]
        before = written(Path(report))  # an earlier run's --json is not this run's verdict
        code = subprocess.run(command).returncode
        try:
            if written(Path(report)) == before:
                raise OSError("not written by this run")
            found = json.loads(Path(report).read_text())
        except (OSError, ValueError):
            # (on a line of its own: a rank ended mid-line, its output straight on the terminal)
            print(f"\nNO-GO: the preflight ended without a verdict (torchrun exit code {code})")
            return code or 1
    print(f"\npreflight, {args.nproc_per_node} ranks: {found['verdict']}")
    for check in found["checks"]:
        if check["status"] == "FAIL":
            print(f"  fix {check['name']}: {check['fix']}")
    return 1 if found["verdict"].startswith("NO-GO") else 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.nproc_per_node is not None:
        return launch(args, argv)
    sys.path.insert(0, str(REPO))
    import train_gpt as tg

    rank0 = os.environ.get("RANK", "0") == "0"
    cl = Checklist(speak=rank0)
    timer = watchdog(cl, args.deadline)
    t0 = time.perf_counter()
    if rank0:
        print(
            f"preflight {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, "
            f"{socket.gethostname()}",
            flush=True,
        )
    run_checks(cl, tg, args)
    seconds = time.perf_counter() - t0
    timer.cancel()
    if cl.speak:
        report = cl.as_json() | {"seconds": round(seconds, 1)}
        if args.json:
            tg.atomic_write_bytes(args.json, (json.dumps(report, indent=1) + "\n").encode())
        print(f"preflight took {seconds:.1f}s")
        print("\n".join(cl.summary()), flush=True)
    # Rank 0 alone gives the verdict's exit status: another rank's NO-GO, first, would have
    # torchrun end rank 0 before it printed the verdict or wrote --json.
    return 1 if cl.speak and cl.verdict().startswith("NO-GO") else 0


def cli() -> None:
    code = main()
    with contextlib.suppress(Exception):  # the group torchrun made, closed in order
        import torch.distributed as dist

        if dist.is_initialized():
            dist.barrier()
            dist.destroy_process_group()
    sys.stdout.flush()
    os._exit(code)  # as train_gpt.py: skip torch's C++ teardown (gloo aborts in it at times)


if __name__ == "__main__":
    cli()
