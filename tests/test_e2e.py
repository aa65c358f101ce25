"""End to end: real train_gpt.py runs under torchrun (gloo, CPU) on the tiny offline dataset."""

from __future__ import annotations

import ast
import json
import math
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import REPO, TINY_ENV, children, copy_dataset, kill_job, run_train
from records.golf.pack import pack_source

FORMATS = {  # the baseline's lines, byte for byte (people grep them)
    "train": r"step:\d+/\d+ train_loss:\d+\.\d{4} train_time:\d+ms step_avg:\d+\.\d{2}ms",
    "val": r"step:\d+/\d+ val_loss:\d+\.\d{4} val_bpb:\d+\.\d{4} train_time:\d+ms "
    r"step_avg:\d+\.\d{2}ms",
    "peak": r"peak memory allocated: \d+ MiB reserved: \d+ MiB",
    "serialized": r"Serialized model int8\+zlib: \d+ bytes "
    r"\(payload:\d+ raw_torch:\d+ payload_ratio:\d+\.\d{2}x\)",
    "total": r"Total submission size int8\+zlib: \d+ bytes",
    "final": r"final_int8_zlib_roundtrip val_loss:\d+\.\d{4} val_bpb:\d+\.\d{4} eval_time:\d+ms",
    "exact": r"final_int8_zlib_roundtrip_exact val_loss:\d+\.\d{8} val_bpb:\d+\.\d{8}",
    "val_loader": (
        r"val_loader:shards pattern=\S+fineweb_val_\[0-9\]\*\.bin tokens:\d+ bytes:\d+ "
        r"bytes_from:tokenizer"
    ),
    "train_loader": r"train_loader:dataset:\S+ train_shards:\d+",
}


def losses(run) -> list[float]:
    return [
        float(re.search(r"train_loss:(\S+)", line).group(1))
        for line in run.lines("step:")
        if "train_loss" in line
    ]


def exact(run) -> tuple[float, float]:
    (line,) = run.lines("final_int8_zlib_roundtrip_exact")
    return tuple(float(v) for v in re.findall(r":(\d+\.\d+)", line))


def test_log_lines_match_the_baseline_formats(tiny_run):
    out = tiny_run.stdout.splitlines()
    for name, pattern in FORMATS.items():
        assert any(re.fullmatch(pattern, line) for line in out), (
            f"no {name} line matching {pattern}"
        )
    steps = [
        int(re.match(r"step:(\d+)/", line).group(1))
        for line in tiny_run.lines("step:")
        if "train_loss" in line
    ]
    assert steps == list(range(1, int(TINY_ENV["ITERATIONS"]) + 1))
    val_steps = [
        int(re.match(r"step:(\d+)/", line).group(1))
        for line in tiny_run.lines("step:")
        if "val_loss" in line
    ]
    assert val_steps == [0, 3, 6]
    assert out[-1].startswith("final_int8_zlib_roundtrip_exact ")


def test_rank0_log_embeds_the_source_then_every_console_line(tiny_run):
    log = tiny_run.log_path.read_text(encoding="utf-8")
    source = (REPO / "train_gpt.py").read_text(encoding="utf-8")
    assert log.startswith(source + "\n" + "=" * 100 + "\n")
    header = log[len(source) + 102 :]
    assert header.startswith("Running Python ") and "Running PyTorch " in header
    assert "nvidia-smi" in header or "NVIDIA-SMI" in header
    for line in tiny_run.lines("step:") + tiny_run.lines("final_int8"):
        assert line in log
    assert f"Code size: {len(source.encode())} bytes" in log


def test_a_run_of_the_packed_script_scores_the_same_and_logs_its_packed_size(
    tmp_path, tiny_dataset, tiny_run
):
    packed = pack_source((REPO / "train_gpt.py").read_bytes())
    script = tmp_path / "packed" / "train_gpt.py"
    script.parent.mkdir()
    script.write_bytes(packed)
    run = run_train(tmp_path / "run", tiny_dataset, script=script)
    assert run.returncode == 0, run.why()
    assert run.numbers() == tiny_run.numbers()
    log = run.log_path.read_bytes()
    assert log.startswith(packed + b"\n") and f"Code size: {len(packed)} bytes".encode() in log


def test_outputs_are_written_whole(tiny_run):
    import zipfile

    names = zipfile.ZipFile(tiny_run.workdir / "final_model.pt").namelist()
    assert names and all(n.startswith("final_model/") for n in names)  # the baseline's, its size
    assert (tiny_run.workdir / "final_model.int8.ptz").stat().st_size > 0
    assert not list(tiny_run.workdir.glob("*.tmp")) and not list(tiny_run.workdir.glob(".*.tmp"))


def test_warmup_with_restore_gives_the_same_numbers_as_no_warmup(tmp_path, tiny_dataset, tiny_run):
    run = run_train(tmp_path / "nowarm", tiny_dataset, WARMUP_STEPS=0)
    assert run.returncode == 0, run.why()
    assert run.numbers() == tiny_run.numbers()


@pytest.mark.parametrize(
    "toggles",
    [
        {"TRAIN_PREFETCH": 0},
        {"TRAIN_PREFETCH_QUEUE": 1, "TRAIN_COPY_STREAM": 0, "VAL_PREFETCH": 0},
        {"TRAIN_PREFETCH_QUEUE": 5, "VAL_PREFETCH_QUEUE": 1, "VAL_COPY_STREAM": 0},
    ],
    ids=["sync_loader", "queue1_no_streams_sync_val", "queue5_val_queue1"],
)
def test_pipeline_toggles_change_no_number(tmp_path, tiny_dataset, tiny_run, toggles):
    run = run_train(tmp_path / "toggled", tiny_dataset, **toggles)
    assert run.returncode == 0, run.why()
    assert run.numbers() == tiny_run.numbers()


@pytest.mark.parametrize("nproc", [0, 1, 4])
def test_world_sizes_agree(tmp_path, tiny_dataset, tiny_run, nproc):
    """grad_accum_steps = 8 // WORLD_SIZE keeps the math; only float summation order differs.
    nproc=0: plain python runs a single process (world_size:1 grad_accum_steps:8)."""
    run = run_train(tmp_path / f"ws{nproc}", tiny_dataset, nproc=nproc)
    assert run.returncode == 0, run.why()
    assert run.lines("world_size:") == [
        f"world_size:{max(nproc, 1)} grad_accum_steps:{8 // max(nproc, 1)}"
    ]
    assert run.lines("val_loader:") == tiny_run.lines("val_loader:")
    assert (
        losses(run)[0] == losses(tiny_run)[0]
    )  # before any update: the same tokens, the same mean
    assert losses(run) == pytest.approx(losses(tiny_run), abs=2e-3)
    assert exact(run) == pytest.approx(exact(tiny_run), abs=1e-3)


@pytest.fixture(scope="module")
def untrained_on_2_ranks(tmp_path_factory, tiny_dataset):
    """The initial weights scored on 2 ranks (ITERATIONS=0)."""
    run = run_train(tmp_path_factory.mktemp("eval2"), tiny_dataset, ITERATIONS=0, WARMUP_STEPS=0)
    assert run.returncode == 0, run.why()
    return run


@pytest.mark.parametrize("nproc", [1, 4])
def test_validation_agrees_across_world_sizes_to_1e_5(
    tmp_path, tiny_dataset, untrained_on_2_ranks, nproc
):
    """The same (untrained) weights evaluated on 1, 2 or 4 ranks: only the batching differs."""
    run = run_train(tmp_path / f"eval{nproc}", tiny_dataset, nproc=nproc, ITERATIONS=0,
                    WARMUP_STEPS=0)  # fmt: skip
    assert run.returncode == 0, run.why()
    assert exact(run) == pytest.approx(exact(untrained_on_2_ranks), abs=1e-5)


def test_corrupt_train_shard_fails_naming_it(tmp_path, tiny_dataset):
    dataset = copy_dataset(tiny_dataset, tmp_path)
    bad = sorted(dataset.dataset_dir.glob("fineweb_train_*.bin"))[-1]
    with open(bad, "r+b") as f:
        f.write((123).to_bytes(4, "little"))
    run = run_train(tmp_path / "run", dataset)
    assert run.returncode != 0
    assert f"error: {bad}: magic 123: expected 20240520, not a token shard" in run.stderr
    assert not our_traceback(run) and not run.lines("step:")


def test_token_out_of_range_fails_naming_the_file(tmp_path, tiny_dataset):
    import train_gpt as tg
    from data.shard_io import write_shard

    dataset = copy_dataset(tiny_dataset, tmp_path)
    bad = (
        dataset.dataset_dir / "fineweb_train_000000_bad.bin"
    )  # sorts second: loaded mid-run by the worker
    write_shard(bad, [1, 5, 5000, 7])
    first = dataset.dataset_dir / "fineweb_train_000000.bin"
    write_shard(first, tg.load_data_shard(first)[:4096])  # 4 steps of 1,024 tokens, then it
    run = run_train(tmp_path / "run", dataset, ITERATIONS=300, VAL_LOSS_EVERY=0, TRAIN_LOG_EVERY=0)
    assert run.returncode != 0
    assert f"error: {bad}: token 5000 at position 2: expected < VOCAB_SIZE=1024" in run.stderr
    assert not our_traceback(run)  # found by the loader thread, said in one line all the same


def test_val_token_out_of_range_fails_at_startup(tmp_path, tiny_dataset):
    from data.shard_io import write_shard

    dataset = copy_dataset(tiny_dataset, tmp_path)
    bad = dataset.dataset_dir / "fineweb_val_000001.bin"
    write_shard(bad, [1, 2000])
    run = run_train(tmp_path / "run", dataset)
    assert (
        run.returncode != 0 and f"error: {bad}: token 2000" in run.stderr and not run.lines("step:")
    )


@pytest.mark.parametrize(
    "env, message",
    [
        ({"ITERATIONS": "abc"}, "error: ITERATIONS='abc': expected an integer"),
        (
            {"VOCAB_SIZE": "2048"},
            "error: VOCAB_SIZE=2048: expected 1024, the vocab size of TOKENIZER_PATH=",
        ),
        (
            {"TOKENIZER_PATH": "/nonexistent/tok.model"},
            "error: TOKENIZER_PATH=/nonexistent/tok.model: no such file",
        ),
        ({"DATA_PATH": "/nonexistent"}, "error: DATA_PATH=/nonexistent: no such folder"),
        (
            {"DATA_PATH": "/nonexistent", "TOKENIZER_PATH": "/nonexistent/tok.model"},
            "error: DATA_PATH=/nonexistent: no such folder",  # the data first: the likelier cause
        ),
        (
            {"TRAIN_LOADER": "docpack", "TRAIN_BATCH_TOKENS": "1048576"},
            "error: TRAIN_LOADER=docpack: no train shard holds 262146 tokens (one micro-step",
        ),
    ],
)
def test_bad_input_ends_the_run_with_one_message(tmp_path, tiny_dataset, env, message):
    run = run_train(tmp_path / "run", tiny_dataset, **env)
    assert run.returncode != 0  # torchrun reports a failed worker as exit 1, with its own summary
    errors = [line for line in run.stderr.splitlines() if re.match(r"(\[rank \d+\] )?error:", line)]
    assert len(errors) == 1 and errors[0].startswith(message), run.stderr[-2000:]
    assert not our_traceback(run)
    assert launcher_root_cause(run) == errors[0], run.stderr[-2000:]  # what the user reads last
    logs = sorted((tmp_path / "run" / "logs").glob("*.txt"))  # none: stopped before its settings
    assert [log.read_text().splitlines()[-1] for log in logs] in ([], errors)  # it ends the log


@pytest.mark.parametrize(
    "env, message",
    [
        (
            {"TRAIN_SEQ_LEN": "96"},
            "TRAIN_BATCH_TOKENS=1024: expected a multiple of 8 x TRAIN_SEQ_LEN=96",
        ),
        ({"EVAL_STRIDE": "65"}, "EVAL_STRIDE=65: expected <= EVAL_SEQ_LEN=64"),
    ],
)
def test_the_settings_of_a_2_rank_tiny_run_are_refused_before_it_starts(env, message):
    """What Hyperparameters refuses ends a run as ITERATIONS='abc' does above (one `error:` line
    of the message, under torchrun): the messages that depend on the tiny run's settings on 2
    ranks (test_config holds the per-variable ones)."""
    import train_gpt as tg

    with pytest.raises(tg.ConfigError) as err:
        tg.Hyperparameters.from_env(TINY_ENV | env | {"RUN_ID": "r"}, 2)
    assert str(err.value).startswith(message)


@pytest.mark.parametrize(
    "env, message",
    [
        ({"ITERATIONS": "abc"}, "ITERATIONS='abc': expected an integer"),
        ({"WORLD_SIZE": "8"}, "RANK=None WORLD_SIZE=8: expected both (as torchrun sets them)"),
        ({"RANK": "1"}, "RANK=1 WORLD_SIZE=None: expected both (as torchrun sets them)"),
        ({"RANK": "2", "WORLD_SIZE": "2"}, "RANK=2: expected 0 <= RANK < WORLD_SIZE=2"),
    ],
)
def test_bad_input_exits_2_from_plain_python(tmp_path, tiny_dataset, env, message):
    """WORLD_SIZE=8 alone would train one process on 1/8 of each batch and score 1/8 of the split"""
    run = run_train(tmp_path / "run", tiny_dataset, nproc=0, **env)
    assert run.returncode == 2 and re.match(
        rf"(\[rank \d\] )?error: {re.escape(message)}", run.stderr
    )
    assert run.stderr.count("\n") == 1


def test_a_misspelt_variable_is_named_with_the_likely_one_and_the_run_goes_on(
    tmp_path, tiny_dataset
):
    run = run_train(tmp_path, tiny_dataset, ITERATIONS="2", NUM_LAYER="3", EVAL_STRIDES="8")
    assert run.returncode == 0, run.why()
    assert run.lines("WARNING: ") == [
        "WARNING: EVAL_STRIDES is not a variable of this script; did you mean EVAL_STRIDE?",
        "WARNING: NUM_LAYER is not a variable of this script; did you mean NUM_LAYERS?",
    ]
    assert run.lines("final_int8_zlib_roundtrip_exact")


def test_the_log_names_its_data_by_the_builders_fingerprint(tiny_run, tiny_dataset):
    """The score depends on the data (the quick start's: this Python's docstrings): the log says
    which, as data/build_local_dataset.py prints it."""
    from data.build_local_dataset import data_fingerprint

    (line,) = tiny_run.lines("data_fingerprint:")
    digest = data_fingerprint(tiny_dataset.dataset_dir, tiny_dataset.tokenizer_path)
    assert line.split()[0] == f"data_fingerprint:{digest}"


def test_the_console_shows_the_changed_settings_and_the_log_the_full_json(tiny_run):
    (settings,) = tiny_run.lines("settings: ")
    assert "NUM_LAYERS=2 " in settings and "SEED" not in settings  # the default seed: not shown
    assert settings.endswith(f"(all of them: logs/{tiny_run.run_id}.txt)")
    assert not tiny_run.lines("hyperparameters:")
    log = tiny_run.log_path.read_text()
    (full,) = [line for line in log.splitlines() if line.startswith("hyperparameters:")]
    assert json.loads(full.removeprefix("hyperparameters:"))["seed"] == 1337


def test_tools_trace_writes_a_chrome_trace_per_rank_with_named_lanes(
    tmp_path, tiny_dataset, tiny_run
):
    trace_dir = tmp_path / "traces"
    args = ("--out", str(trace_dir), "--steps", "2")
    run = run_train(tmp_path / "run", tiny_dataset, script=REPO / "tools" / "trace.py", args=args)
    assert run.returncode == 0, run.why()
    assert run.numbers() == tiny_run.numbers()  # tracing changes no number
    assert sorted(p.name for p in trace_dir.iterdir()) == ["rank0.json", "rank1.json"]
    for path in trace_dir.iterdir():
        events = json.loads(path.read_text())["traceEvents"]
        lanes = {e["tid"]: e["args"]["name"] for e in events if e.get("name") == "thread_name"}
        ranges = [(lanes.get(e.get("tid")), e["name"]) for e in events if e.get("ph") == "X"]
        assert ("MainThread", "forward") in ranges and ("MainThread", "optimizer") in ranges
        assert ("train_prefetch", "stage_batch") in ranges  # the loader's worker, its own lane
        assert sum(name == "optimizer" for _, name in ranges) == 2  # --steps 2


def test_tools_trace_refuses_an_output_folder_it_cannot_create_before_training(tmp_path):
    run = subprocess.run(
        [sys.executable, str(REPO / "tools" / "trace.py"), "--out", "/proc/none"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 2 and "--out /proc/none: cannot create it" in run.stderr
    assert run.stderr.count("error:") == 1 and not run.stdout


def test_world_size_that_does_not_divide_8_is_refused(tmp_path, tiny_dataset):
    run = run_train(tmp_path / "run", tiny_dataset, nproc=3)
    assert run.returncode != 0
    assert "error: WORLD_SIZE=3: expected a divisor of 8" in run.stderr


def test_tools_timing_logs_each_steps_phases_and_changes_no_number(
    tmp_path, tiny_dataset, tiny_run
):
    script, args = REPO / "tools" / "timing.py", ("--every", "4")
    run = run_train(tmp_path / "timed", tiny_dataset, script=script, args=args)
    assert run.returncode == 0, run.why()
    assert run.numbers() == tiny_run.numbers()  # timing changes no number
    log = run.log_path.read_text().splitlines()  # the run's log has them too, as printed
    lines = run.lines("timing_breakdown ")
    assert lines == [line for line in log if line.startswith("timing_breakdown ")]
    assert [int(re.search(r"step:(\d+)", line).group(1)) for line in lines] == [1, 2, 3, 4, 5, 6]
    for line in lines:
        ms = dict(re.findall(r" (\w+)_ms:(\d+\.\d{2})(?= |$)", line))
        assert list(ms) == ["data_wait", "h2d", "forward", "backward", "optimizer", "step"], line
        ms = {name: float(v) for name, v in ms.items()}
        assert ms["h2d"] == 0 and ms["forward"] > 0 and ms["backward"] > 0  # no copy on a CPU
        # host times on a CPU: the phases, one after the other, lie within their step
        assert sum(ms.values()) - ms["step"] <= ms["step"] + 0.03, line  # (each rounded)
    (summary,) = run.lines("timing_summary ")
    found = re.fullmatch(
        r"timing_summary data_wait_total_ms:(\d+\.\d{2}) train_time_ms:(\d+) "
        r"data_wait_share:(\d+\.\d{3})%",
        summary,
    )
    assert found and summary in log, summary
    wait_ms, train_ms, share = map(float, found.groups())
    (last,) = run.lines("step:6/6 val_loss:")
    assert f" train_time:{train_ms:.0f}ms " in last  # training's time, as the last step's line
    # as the tool divides, to what the printed numbers carry: train_ms is rounded to 1 ms (a tiny
    # run trains ~100 ms), wait_ms to 0.01 ms, the share to 0.001%
    slack = 0.0005 + 100 * (0.005 / train_ms + wait_ms * 0.5 / train_ms**2)
    assert share == pytest.approx(100 * wait_ms / train_ms, abs=slack)
    assert log.index(summary) == log.index(last) + 1  # at training's end


@pytest.fixture(scope="module")
def shuffled_run(tmp_path_factory, tiny_dataset):
    run = run_train(tmp_path_factory.mktemp("shuffled"), tiny_dataset, TRAIN_LOADER="shuffled")
    assert run.returncode == 0, run.why()
    return run


def test_shuffled_order_trains_and_says_so(shuffled_run, tiny_run):
    (line,) = shuffled_run.lines("train_tokens:")
    assert " order:shuffled " in line
    assert losses(shuffled_run) != losses(tiny_run)  # other batches, another run
    assert shuffled_run.lines("val_loader:") == tiny_run.lines("val_loader:")


@pytest.mark.parametrize(
    "toggles",
    [
        {"TRAIN_PREFETCH": 0},
        {"TRAIN_PREFETCH_QUEUE": 1, "TRAIN_COPY_STREAM": 0},
        {"TRAIN_PREFETCH_QUEUE": 5, "WARMUP_STEPS": 0},
    ],
    ids=["sync_loader", "queue1", "queue5_no_warmup"],
)
def test_shuffled_order_numbers_do_not_depend_on_the_pipeline(
    tmp_path, tiny_dataset, shuffled_run, toggles
):
    run = run_train(tmp_path / "run", tiny_dataset, TRAIN_LOADER="shuffled", **toggles)
    assert run.returncode == 0, run.why()
    assert run.numbers() == shuffled_run.numbers()


@pytest.fixture(scope="module")
def docpack_run(tmp_path_factory, tiny_dataset):
    run = run_train(tmp_path_factory.mktemp("docpack"), tiny_dataset, TRAIN_LOADER="docpack")
    assert run.returncode == 0, run.why()
    return run


def test_docpack_order_trains_with_document_masked_attention(docpack_run, tiny_run):
    (line,) = docpack_run.lines("train_tokens:")
    assert " order:docpack " in line
    (backend,) = docpack_run.lines("attention_backend:")
    assert backend == "attention_backend:sdpa documents:sdpa_per_segment"
    assert losses(docpack_run) != losses(tiny_run)  # other batches, another run
    assert all(math.isfinite(v) for v in losses(docpack_run))
    assert docpack_run.lines("val_loader:") == tiny_run.lines("val_loader:")


@pytest.mark.parametrize(
    "toggles",
    [{"TRAIN_PREFETCH": 0}, {"TRAIN_PREFETCH_QUEUE": 1, "WARMUP_STEPS": 0}],
    ids=["sync_loader", "queue1_no_warmup"],
)
def test_docpack_numbers_do_not_depend_on_the_pipeline(
    tmp_path, tiny_dataset, docpack_run, toggles
):
    run = run_train(tmp_path / "run", tiny_dataset, TRAIN_LOADER="docpack", **toggles)
    assert run.returncode == 0, run.why()
    assert run.numbers() == docpack_run.numbers()


@pytest.fixture(scope="module")
def doc_val_run(tmp_path_factory, tiny_dataset):
    run = run_train(tmp_path_factory.mktemp("doc_val"), tiny_dataset, VAL_DOC_ATTENTION=1)
    assert run.returncode == 0, run.why()
    return run


def test_document_masked_validation_scores_the_same_tokens_and_bytes(doc_val_run, tiny_run):
    assert doc_val_run.lines("val_loader:") == tiny_run.lines("val_loader:")
    assert losses(doc_val_run) == losses(tiny_run)  # training is untouched
    assert exact(doc_val_run) != exact(tiny_run)  # but attention stops at document starts


@pytest.mark.parametrize(
    "toggles",
    [{"VAL_PREFETCH": 0}, {"VAL_PREFETCH_QUEUE": 1, "VAL_COPY_STREAM": 0}],
    ids=["sync_validation", "queue1"],
)
def test_document_masked_validation_does_not_depend_on_the_pipeline(
    tmp_path, tiny_dataset, doc_val_run, toggles
):
    run = run_train(tmp_path / "run", tiny_dataset, VAL_DOC_ATTENTION=1, **toggles)
    assert run.returncode == 0, run.why()
    assert run.numbers() == doc_val_run.numbers()


def write_exact_byte_sidecar(dataset) -> None:
    """fineweb_val_bytes_000000.bin as CaseOps data has it (entry i = token i's bytes), made here
    from the tokenizer: a run that reads it must score exactly as one that counts with it."""
    import numpy as np
    import sentencepiece as spm

    import train_gpt as tg
    from data.shard_io import write_shard

    sp = spm.SentencePieceProcessor(model_file=str(dataset.tokenizer_path))
    luts = tg.build_sentencepiece_luts(sp, dataset.vocab_size)
    files = tg.list_shards(str(Path(dataset.dataset_dir) / "fineweb_val_[0-9]*.bin"))
    tokens = np.concatenate([tg.load_data_shard(f) for f in files]).astype(np.int64)
    after_boundary = np.concatenate(([True], luts.is_boundary[tokens[:-1]]))
    counts = luts.base_bytes[tokens] + (luts.has_leading_space[tokens] & ~after_boundary)
    write_shard(Path(dataset.dataset_dir) / "fineweb_val_bytes_000000.bin", counts)


def test_byte_sidecars_score_exactly_as_the_tokenizer_counts(tmp_path, tiny_dataset, tiny_run):
    dataset = copy_dataset(tiny_dataset, tmp_path)
    write_exact_byte_sidecar(dataset)
    run = run_train(tmp_path / "run", dataset)
    assert run.returncode == 0, run.why()
    ours, theirs = (re.sub(r"pattern=\S+", "", r.lines("val_loader:")[0]) for r in (run, tiny_run))
    assert ours == theirs.replace("bytes_from:tokenizer", "bytes_from:sidecar")
    assert run.numbers()[1:] == tiny_run.numbers()[1:]  # all but the val_loader line


def test_a_dead_rank_ends_the_whole_job_promptly(tmp_path, tiny_dataset):
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(
        TINY_ENV,
        DATA_PATH=str(tiny_dataset.dataset_dir),
        TOKENIZER_PATH=str(tiny_dataset.tokenizer_path),
        ITERATIONS="100000",
        VAL_LOSS_EVERY="0",
        TRAIN_LOG_EVERY="1",
        PYTHONUNBUFFERED="1",
        OMP_NUM_THREADS="1",
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node=2",
            str(REPO / "train_gpt.py"),
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    watchdog = threading.Timer(180, kill_job, (proc.pid,))  # a hung job fails, never hangs
    watchdog.start()
    try:
        for line in proc.stdout:
            if line.startswith("step:3/"):
                break
        workers = {pid: rank for pid, rank in children(proc.pid).items() if rank is not None}
        assert sorted(workers.values()) == [0, 1]
        victim = next(pid for pid, rank in workers.items() if rank == 1)
        os.kill(victim, signal.SIGKILL)
        start = time.monotonic()
        proc.stdout.read()
        assert proc.wait(timeout=90) != 0
        assert time.monotonic() - start < 60
        assert not any(Path(f"/proc/{pid}").exists() for pid in workers)
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            kill_job(proc.pid)


def test_import_has_no_side_effects(tmp_path):
    code = (
        "import os, sys, threading; sys.path.insert(0, sys.argv[1]); before = set(os.listdir('.'));"
        "import train_gpt, torch.distributed as dist;"
        "assert threading.active_count() == 1, threading.enumerate();"
        "assert not dist.is_initialized();"
        "assert set(os.listdir('.')) == before, set(os.listdir('.')) - before"
    )
    subprocess.run([sys.executable, "-c", code, str(REPO)], cwd=tmp_path, check=True, timeout=120)


def test_script_lines_are_at_most_100_characters():  # and any number of them
    lines = (REPO / "train_gpt.py").read_text(encoding="utf-8").splitlines()
    # (in bytes too: a tool that counts bytes sees `·` and `−` as two or three)
    assert [n for n, line in enumerate(lines, 1) if len(line.encode()) > 100] == []


def test_the_script_is_formatted_by_ruff_alone_in_functions_of_at_most_80_lines():
    """No hand-packing: ruff's formatting at the project's settings, no `# fmt: skip` without the
    reason a table reads better aligned, and no function longer than about a screen."""
    source = (REPO / "train_gpt.py").read_text(encoding="utf-8")
    skips = [line for line in source.splitlines() if "# fmt: skip" in line]
    assert all(re.search(r"# fmt: skip  # \S", line) for line in skips), skips
    long = [
        (node.name, node.end_lineno - node.lineno + 1)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno - node.lineno + 1 > 80
    ]
    assert long == []


# -----------------------------
# helpers
# -----------------------------


def launcher_root_cause(run) -> str:
    """What torchrun's failure report, the last thing printed, gives as the root cause: the
    `traceback :` entry just above its closing border (a link about tracebacks when the failed
    rank left no error file)."""
    *_, entry, border = run.stderr.rstrip().splitlines()
    assert set(border) == {"="}, run.stderr[-2000:]
    return entry.removeprefix("  traceback : ")


def our_traceback(run) -> bool:
    """A traceback through train_gpt.py (torchrun's own failure summary does not count)."""
    return f'File "{REPO / "train_gpt.py"}"' in run.stderr
