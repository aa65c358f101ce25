"""`new`: build a record folder from train logs, written all at once.

The folder gets the exact script that ran as train_gpt.py: the source the logs embed (they must
all embed the same one), or `--script` for console captures. A record's runs run the script
`specialize` wrote for their settings (records/golf/specialize.py), so that is what ships; the
logs' code count (`Code size (compressed)` when they print it, else `Code size`) is what
submission.json states. Then one `train_seed{SEED}.log` per run, a `submission.json` whose every
number comes from the logs, and a README with the results.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
import shlex
import shutil
import statistics
import tempfile
from pathlib import Path

from .errors import SubmissionError
from .evidence import compliance_of, shipped_artifact
from .folders import write_bytes_atomic
from .logs import TrainLog, checkpoint_writer, read_log
from .rules import (
    ARTIFACT_LIMIT_BYTES,
    EVAL_LIMIT_MS,
    MIN_SEEDS,
    SCRIPT_NAME,
    TRACKS,
    TRAIN_LIMIT_MS,
)
from .specialize import is_specialised_script

# -----------------------------
# INPUTS
# -----------------------------


def slugify(name: str) -> str:
    """Folder-safe name: 'Int6 + TTT (v2)' -> 'Int6_+_TTT_v2'."""
    slug = re.sub(r"[^A-Za-z0-9.+\-]+", "_", name).strip("_.")
    if not slug:
        raise SubmissionError(f"--name {name!r} has no usable characters for a folder name")
    return slug


def _read(path: Path) -> TrainLog:
    try:
        return read_log(path)
    except OSError as exc:
        raise SubmissionError(f"cannot read {path}: {exc.strerror or exc}") from None


def _unscored(log: TrainLog) -> SubmissionError:
    if log.not_finite:
        why = f"its {', '.join(dict.fromkeys(log.not_finite))} is not finite: the run diverged"
    elif log.checkpoints:  # (a pod that died: its run goes on in another log)
        why = "it wrote checkpoints: give the log of the run that resumed from one too"
    elif log.step_evals:
        why = "only step validations, scored before quantization: did the run finish?"
    else:
        why = "is it a train log of a finished run?"
    return SubmissionError(f"{log.path} has no val_bpb result of a final evaluation ({why})")


def collect_runs(paths: list[str | Path], seeds: list[int] | None = None) -> list[TrainLog]:
    """Parse the logs given to `new`, each with a seed and a score; sorted by seed."""
    return collect_logs(paths, seeds)[0]


def collect_logs(
    paths: list[str | Path], seeds: list[int] | None = None
) -> tuple[list[TrainLog], dict[int, list[TrainLog]]]:
    """The logs given to `new`: each run's scored log, sorted by seed, and per seed the logs of
    the earlier parts of its run, oldest first (a pod that died after a checkpoint, the run
    resumed from it in the next log). Any other log without a score is refused."""
    if seeds is not None and len(seeds) != len(paths):
        raise SubmissionError(f"--seeds has {len(seeds)} values for {len(paths)} logs")
    logs = []
    for i, p in enumerate(map(Path, paths)):
        lg = _read(p)
        if lg.scored is None and not lg.checkpoints:  # (no earlier part of a resumed run)
            raise _unscored(lg)
        if seeds is not None:
            if lg.seed_line is not None and lg.seed_line != seeds[i]:
                raise SubmissionError(f"{p} says seed:{lg.seed_line} but --seeds gives {seeds[i]}")
            lg.seed_line = seeds[i]
        elif lg.seed is None:
            raise SubmissionError(
                f"{p}: no `seed:N` line and no seed in the file name; pass --seeds"
            )
        logs.append(lg)
    runs = [lg for lg in logs if lg.scored is not None]
    parts = {lg.seed: _earlier_parts(lg, logs) for lg in runs}
    in_a_run = {id(k) for chain in parts.values() for k in chain}
    for lg in logs:
        if lg.scored is None and id(lg) not in in_a_run:
            raise _unscored(lg)
    seen: dict[int, str] = {}
    for lg in runs:
        if lg.seed in seen:
            raise SubmissionError(f"{lg.path} and {seen[lg.seed]} are both seed {lg.seed}")
        seen[lg.seed] = str(lg.path)
    return sorted(runs, key=lambda lg: lg.seed), parts


def _earlier_parts(run: TrainLog, logs: list[TrainLog]) -> list[TrainLog]:
    chain: list[TrainLog] = []
    before = checkpoint_writer(run, logs)
    while before is not None and before is not run and all(before is not k for k in chain):
        chain.insert(0, before)
        before = checkpoint_writer(before, logs)
    return chain


def _embedded_script(logs: list[TrainLog]) -> bytes | None:
    embedded = [lg for lg in logs if lg.source is not None]
    for lg in embedded[1:]:
        if lg.source != embedded[0].source:
            raise SubmissionError(
                f"{lg.path} and {embedded[0].path} embed different scripts; "
                f"one record folder holds one {SCRIPT_NAME}"
            )
    return embedded[0].source if embedded else None


def resolve_script(logs: list[TrainLog], script: str | Path | None = None) -> bytes:
    """The exact script that ran: the source the logs embed, or `script`; sizes must agree."""
    embedded = _embedded_script(logs)
    if script is not None:
        try:
            code = Path(script).read_bytes()
        except OSError as exc:
            raise SubmissionError(f"cannot read --script {script}: {exc.strerror or exc}") from None
        if embedded is not None and code != embedded:
            raise SubmissionError(
                f"--script {script} differs from the source embedded in the logs; "
                "leave out --script to use the embedded one"
            )
    elif embedded is not None:
        code = embedded
    else:
        raise SubmissionError(
            "no log embeds the script (console captures don't): pass --script path/to/train_gpt.py"
        )
    if not code.strip():
        raise SubmissionError("the script is empty")
    for lg in logs:
        if lg.code_bytes is not None and lg.code_bytes != len(code):
            raise SubmissionError(
                f"{lg.path} says `Code size: {lg.code_bytes} bytes` but the script is "
                f"{len(code)} bytes: it is not the script that ran"
            )
    return code


# -----------------------------
# SUBMISSION.JSON
# -----------------------------


def _r(x: float | None, nd: int = 8) -> float | None:
    return None if x is None else round(x, nd)


def _seed_result(lg: TrainLog, artifact: int | None) -> dict:
    ms, _ = lg.eval_time
    avg, _ = lg.step_avg
    train_s = lg.train_time_ms / 1000.0 if lg.train_time_ms is not None else None
    return {
        "val_bpb": lg.scored.val_bpb,
        "val_loss": lg.scored.val_loss,
        "artifact_bytes": artifact,
        "steps": lg.steps,
        "step_avg_ms": _r(avg, 2 if lg.step_avg_text else 3),
        "train_time_s": _r(train_s, 3),
        "eval_time_s": _r(ms / 1000.0 if ms is not None else None, 3),
    }


def _std(values: list[float]) -> float:
    return _r(statistics.stdev(values)) if len(values) > 1 else 0.0


def build_submission(
    logs: list[TrainLog],
    code: bytes,
    *,
    name: str,
    author: str,
    github_id: str,
    date: str,
    blurb: str = "",
    track: str = "10min_16mb",
    hardware: str | None = None,
    pytorch_version: str | None = None,
) -> dict:
    """submission.json for the runs, every number computed from the logs; `code` is the script
    that ran, as shipped. The code's bytes are those the logs count (its packed form's, for a
    run that counts so), the same in every log."""
    sizes = {lg: shipped_artifact(lg, code) for lg in logs}  # by log: names may repeat
    counts = sorted({lg.counted_code_bytes for lg in logs} - {None})
    known = {lg: size for lg, size in sizes.items() if size is not None}
    bpbs = [lg.scored.val_bpb for lg in logs]
    losses = [lg.scored.val_loss for lg in logs]
    versions = sorted({lg.pytorch_version for lg in logs if lg.pytorch_version})
    sub = {
        "author": author,
        "github_id": github_id,
        "name": name,
        "blurb": blurb,
        "date": date,
        "track": track,
        "val_bpb": _r(statistics.fmean(bpbs)),
        "val_loss": _r(statistics.fmean(losses)),
        "val_bpb_std": _std(bpbs),
        "val_loss_std": _std(losses),
        "bytes_total": max(sizes.values()) if None not in sizes.values() else None,
        "bytes_code": counts[-1] if counts else len(code),
        "seeds": [lg.seed for lg in logs],
        "seed_results": {str(lg.seed): _seed_result(lg, sizes[lg]) for lg in logs},
        "hardware": hardware
        or next((lg.hardware for lg in logs if lg.hardware), None)
        or "unknown",
        "pytorch_version": pytorch_version or (versions[0] if versions else "unknown"),
        "compliance": {k: bool(v) for k, v in compliance_of(logs, known).items()},  # unknown: no
    }
    if sub["bytes_total"] is None:
        del sub["bytes_total"]
    return sub


# -----------------------------
# README.md
# -----------------------------


def _readme_head(sub: dict, logs: list[TrainLog]) -> list[str]:
    lines = [
        f"# {sub['name']}",
        "",
        f"By {sub['author']} (@{sub['github_id']}), {sub['date']}. Track: `{sub['track']}`.",
        "",
    ]
    if sub.get("blurb"):
        lines += [sub["blurb"], ""]
    size = f"{sub['bytes_total']:,} bytes" if "bytes_total" in sub else "unknown"
    lines += [
        f"**val_bpb {sub['val_bpb']:.8f}** (mean of {len(logs)} seed(s), std "
        f"{sub['val_bpb_std']:.8f}); val_loss {sub['val_loss']:.8f} nats; largest artifact {size} "
        f"(code {sub['bytes_code']:,} bytes); {sub['hardware']}; PyTorch {sub['pytorch_version']}.",
        "",
    ]
    return lines


def _cell(v) -> str:
    return "?" if v is None else f"{v:,}" if isinstance(v, int) else f"{v}"


def _readme_results(sub: dict, logs: list[TrainLog], parts: dict) -> list[str]:
    lines = [
        "## Results",
        "",
        "| Seed | val_bpb | val_loss | Steps | step_avg (ms) | Train (s) | Eval (s) "
        "| Artifact (bytes) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for lg in logs:
        r = sub["seed_results"][str(lg.seed)]
        cells = [r[k] for k in ("steps", "step_avg_ms", "train_time_s", "eval_time_s")]
        lines.append(
            f"| {lg.seed} | {lg.scored.bpb_text} | {lg.scored.loss_text} | "
            + " | ".join(map(_cell, [*cells, r["artifact_bytes"]]))
            + " |"
        )
    labels = ", ".join(f"`{lab}`" for lab in sorted({lg.scored.label for lg in logs}))
    logs_list = ", ".join(
        f"`train_seed{lg.seed}.log`{_resumed_from(lg.seed, parts)}" for lg in logs
    )
    lines += [
        f"| **mean** | **{sub['val_bpb']:.8f}** | **{sub['val_loss']:.8f}** | | | | | |",
        "",
        f"Scored line: {labels} (the last final evaluation each log prints). Logs: {logs_list}.",
        "",
    ]
    return lines


def _resumed_from(seed: int, parts: dict) -> str:
    """What the README's list of logs says after a run resumed from a checkpoint: that it was
    resumed, from which part's log (`train_seed1337_part1.log`)."""
    names = [f"`{part_name(seed, k)}`" for k in range(1, len(parts.get(seed, ())) + 1)]
    return f" (resumed from {', '.join(names)})" if names else ""


def _readme_compliance(sub: dict) -> list[str]:
    tick = {True: "x", False: " "}
    c = sub["compliance"]
    return [
        "## Compliance",
        "",
        f"- [{tick[c['train_under_600s']]}] training within {TRAIN_LIMIT_MS / 1e3:.0f} s "
        "(the cap is checked after each step)",
        f"- [{tick[c['eval_under_600s']]}] evaluation within {EVAL_LIMIT_MS / 1e3:.0f} s",
        f"- [{tick[c['artifact_under_16mb']]}] artifact (code + compressed model) <= "
        f"{ARTIFACT_LIMIT_BYTES:,} bytes",
        f"- [{tick[c['three_seeds']]}] at least {MIN_SEEDS} seeds",
        "",
    ]


def reproduce_environment(lg: TrainLog) -> list[str]:
    """KEY=VALUE words, shell-quoted, that rerun `lg`: its `settings:` line (every setting that
    is not the default) with its seed; the seed alone when the log has no such line. PRESET is
    left out: the line already lists its values, so the command reads alone."""
    words = [w for w in lg.settings or () if not w.startswith("PRESET=")]
    if not any(w.startswith("SEED=") for w in words):
        words.insert(0, f"SEED={lg.seed}")
    return [f"{k}={shlex.quote(v)}" for k, _, v in (w.partition("=") for w in words)]


def _readme_reproduce(logs: list[TrainLog]) -> list[str]:
    ws = next((lg.world_size for lg in logs if lg.world_size), None) or 8
    lines = ["## Reproduce", "", "```bash"]
    lines += [
        f"{' '.join(reproduce_environment(lg))} torchrun --standalone --nproc_per_node={ws} "
        f"{SCRIPT_NAME}"
        for lg in logs
    ]
    lines += ["```", ""]
    if any(lg.settings is None for lg in logs):
        lines += ["The logs print no `settings:` line: add the variables the runs set.", ""]
    lines += [f"`{SCRIPT_NAME}` here is byte-for-byte the script that produced the logs."]
    source = logs[0].source or b""
    if is_specialised_script(source.decode("utf-8", "replace")):
        lines += [
            "It is the training repository's readable train_gpt.py specialised to these runs' "
            "settings (its docstring names the command that rebuilt it): it takes SEED, RUN_ID, "
            "DATA_PATH and TOKENIZER_PATH and refuses other values of its other settings. Its "
            "code counts as its packed form (`python records/submission.py pack train_gpt.py "
            "-o packed.py` in the training repository writes it), as its logs' `Code size "
            "(compressed)` line says."
        ]
    lines += ["Validate this folder with `python records/submission.py check <this folder>`.", ""]
    return lines


def part_name(seed: int, k: int) -> str:
    """The file of the k-th earlier part of a seed's run (`train_seed{SEED}_part{k}.log`)."""
    return f"train_seed{seed}_part{k}.log"


def render_readme(sub: dict, logs: list[TrainLog], parts: dict | None = None) -> str:
    """README.md with a results table for a new record folder; `parts`: collect_logs'."""
    text = _readme_head(sub, logs) + _readme_results(sub, logs, parts or {})
    return "\n".join(text + _readme_compliance(sub) + _readme_reproduce(logs))


# -----------------------------
# WRITING
# -----------------------------


def _swap_in(tmp: Path, dest: Path) -> None:
    """Rename `tmp` to `dest`, replacing an existing `dest` (restored if the rename fails)."""
    if not dest.exists():
        os.rename(tmp, dest)
        return
    old = dest.parent / f".{dest.name}.{os.getpid()}.old.tmp"
    os.rename(dest, old)
    try:
        os.rename(tmp, dest)
    except BaseException:
        os.rename(old, dest)
        raise
    shutil.rmtree(old, ignore_errors=True)


def write_folder_atomic(dest: Path, files: dict[str, bytes], force: bool = False) -> None:
    """Create `dest` with `files` at once: built in a hidden sibling, then renamed into place."""
    if dest.exists() and not force:
        raise SubmissionError(f"{dest} already exists; pass --force to replace it")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent))
    try:
        for name, data in files.items():
            write_bytes_atomic(tmp / name, data)
        os.chmod(tmp, 0o755)
        _swap_in(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


# -----------------------------
# NEW
# -----------------------------


def _check_inputs(track: str, date: str | None) -> str:
    if track not in TRACKS:
        raise SubmissionError(f"track must be one of {', '.join(TRACKS)}, not {track!r}")
    date = date or _dt.date.today().isoformat()
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", date):
        raise SubmissionError(f"--date {date!r} is not YYYY-MM-DD")
    return date


def _destination(out, records_dir, track: str, date: str, name: str) -> Path:
    if out is not None:
        return Path(out)
    base = Path(records_dir) if records_dir is not None else Path(__file__).resolve().parents[1]
    return base / TRACKS[track] / f"{date}_{slugify(name)}"


def create_record(
    log_paths: list[str | Path],
    *,
    name: str,
    author: str,
    github_id: str,
    blurb: str = "",
    date: str | None = None,
    track: str = "10min_16mb",
    script: str | Path | None = None,
    seeds: list[int] | None = None,
    hardware: str | None = None,
    pytorch_version: str | None = None,
    records_dir: str | Path | None = None,
    out: str | Path | None = None,
    force: bool = False,
) -> Path:
    """Scaffold a record folder from train logs; returns its path (see `new --help`)."""
    date = _check_inputs(track, date)
    logs, parts = collect_logs(log_paths, seeds)
    code = resolve_script([*logs, *(k for chain in parts.values() for k in chain)], script)
    sub = build_submission(
        logs,
        code,
        name=name,
        author=author,
        github_id=github_id,
        blurb=blurb,
        date=date,
        track=track,
        hardware=hardware,
        pytorch_version=pytorch_version,
    )
    files = {SCRIPT_NAME: code}
    files["README.md"] = render_readme(sub, logs, parts).encode("utf-8")
    files["submission.json"] = (json.dumps(sub, indent=2) + "\n").encode("utf-8")
    files.update({f"train_seed{lg.seed}.log": lg.path.read_bytes() for lg in logs})
    for seed, chain in parts.items():
        files.update({part_name(seed, k): lg.path.read_bytes() for k, lg in enumerate(chain, 1)})
    dest = _destination(out, records_dir, track, date, name)
    write_folder_atomic(dest, files, force=force)
    return dest
