"""Every tool's command line: --help answers without importing torch, numpy or matplotlib (what
keeps it quick; its speed is not timed here: a busy machine would fail it), every option has a
help text, and a missing package gives one line naming the command that installs it. Also the
shared quick-start settings and the setup scripts' syntax."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from data import build_local_dataset, setup_hint  # noqa: E402

TOOLS = [
    "data/build_local_dataset.py",
    "data/download_fineweb.py",
    "benchmarks/loader.py",
    "benchmarks/step_time.py",
    *sorted(p.relative_to(REPO).as_posix() for p in (REPO / "tools").glob("[!_]*.py")),
    "records/submission.py",
]
HELPS = [(tool, []) for tool in TOOLS] + [
    ("records/submission.py", [command]) for command in ("new", "check", "stats", "pack")
]
HEAVY = ("torch", "numpy", "matplotlib", "scipy", "sentencepiece", "huggingface_hub", "train_gpt")

# Runs a tool as `python TOOL ARGS` would (its folder first on sys.path, __name__ == "__main__"),
# records every action of each parser that prints help, and reports them with the heavy modules
# that the run imported.
PROBE = textwrap.dedent(
    """
    import argparse, json, runpy, sys
    tool, args, heavy = sys.argv[1], sys.argv[2:], {heavy!r}
    actions, print_help = [], argparse.ArgumentParser.print_help

    def recording_print_help(self, file=None):
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):  # each command's own help
                subs = action._choices_actions
                actions.extend([self.prog, sub.dest, sub.help] for sub in subs)
            elif not isinstance(action, argparse._HelpAction):
                names = action.option_strings or [action.dest]
                actions.append([self.prog, "/".join(names), action.help])
        return print_help(self, file)

    argparse.ArgumentParser.print_help = recording_print_help
    sys.argv = [tool, *args]
    sys.path.insert(0, tool.rsplit("/", 1)[0])
    try:
        runpy.run_path(tool, run_name="__main__")
        code = 0
    except SystemExit as exc:
        code = exc.code
    loaded = [m for m in heavy if m in sys.modules]
    print("PROBE " + json.dumps({{"code": code, "actions": actions, "heavy": loaded}}))
    """
).format(heavy=HEAVY)


def run_help(tool: str, args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO / tool), *args, "--help"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "COLUMNS": "100", "PYTHONDONTWRITEBYTECODE": "1"},
    )


@pytest.mark.parametrize(("tool", "args"), HELPS, ids=[" ".join([t, *a]) for t, a in HELPS])
def test_help_imports_nothing_heavy_and_documents_every_option(tool, args, tmp_path):
    proc = run_help(tool, args, tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("usage:"), proc.stdout[:200]

    probe = subprocess.run(
        [sys.executable, "-c", PROBE, str(REPO / tool), *args, "--help"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    line = next(x for x in probe.stdout.splitlines() if x.startswith("PROBE "))
    found = json.loads(line.removeprefix("PROBE "))
    assert found["code"] in (0, None), probe.stderr[-2000:]
    assert found["heavy"] == [], f"{tool} --help imported {found['heavy']}"
    assert found["actions"], "no parser printed help"
    undocumented = [f"{prog} {name}" for prog, name, text in found["actions"] if not text]
    assert not undocumented, f"options without help text: {undocumented}"


def test_step_time_usage_shows_the_tokenizer_as_required(tmp_path):
    proc = run_help("benchmarks/step_time.py", [], tmp_path)
    usage = proc.stdout.split("\n\n")[0]
    assert " --tokenizer TOKENIZER" in usage and "[--tokenizer" not in usage
    assert "[--baseline BASELINE]" in usage  # needed only for the baseline row and --losses


# ---------------------------------------------------------------------------------------------
# a missing package: one line, the command that installs it
# ---------------------------------------------------------------------------------------------
def test_the_setup_command_follows_the_requirements_files(monkeypatch):
    monkeypatch.chdir(REPO)
    assert setup_hint.setup_command("tqdm") == "bash scripts/setup.sh"
    assert setup_hint.setup_command("huggingface_hub.errors") == "bash scripts/setup.sh"
    assert setup_hint.setup_command("torch.distributed") == "bash scripts/setup.sh"
    assert setup_hint.setup_command("matplotlib.pyplot") == "bash scripts/setup.sh dev"
    assert setup_hint.setup_command("scipy") == "bash scripts/setup.sh dev"
    assert setup_hint.setup_command("no_such_package") is None


MISSING = [
    ("data/download_fineweb.py", ["--mirror", "."], "tqdm", "scripts/setup.sh`"),
    ("data/build_local_dataset.py", ["--no-progress"], "sentencepiece", "scripts/setup.sh`"),
    ("benchmarks/loader.py", [], "torch", "scripts/setup.sh`"),
    ("tools/plot_timing.py", ["log.txt"], "matplotlib", "scripts/setup.sh dev`"),
]


@pytest.mark.parametrize(("tool", "args", "module", "command"), MISSING)
def test_a_missing_package_gives_one_line_naming_the_setup_command(
    tool, args, module, command, tmp_path
):
    (tmp_path / "log.txt").write_text("timing_breakdown step:1 forward_ms:1.0 step_ms:1.0\n")
    # sys.modules[name] = None makes `import name` raise ModuleNotFoundError, as if not installed
    script = (
        f"import runpy, sys; sys.modules[{module!r}] = None; sys.argv = sys.argv[1:]; "
        f"sys.path.insert(0, {str((REPO / tool).parent)!r}); "
        f"runpy.run_path(sys.argv[0], run_name='__main__')"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, str(REPO / tool), *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr[-2000:]
    assert lines[0].startswith(f"error: no module named {module!r}")
    assert lines[0].endswith(f"`bash {REPO}/{command} installs it")  # run from elsewhere


def test_outside_the_venv_the_line_says_to_use_it(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "prefix", "/usr")
    monkeypatch.chdir(REPO)
    message = setup_hint.missing_package_message("tqdm")
    assert "run `bash scripts/setup.sh`, then run this with .venv/bin/python" in message
    monkeypatch.chdir(tmp_path)  # elsewhere: paths that work from there
    message = setup_hint.missing_package_message("tqdm")
    assert f"`bash {REPO}/scripts/setup.sh`" in message and f"{REPO}/.venv/bin/python" in message


# ---------------------------------------------------------------------------------------------
# the quick start's settings: one definition, used by quickstart.sh and build_local_dataset.py
# ---------------------------------------------------------------------------------------------
def test_the_builder_suggests_the_quick_start_settings():
    env = (REPO / "scripts" / "quickstart.env").read_text()
    settings = [x for x in env.splitlines() if x and not x.startswith("#")]
    assert {s.split("=")[0] for s in settings} >= {"NUM_LAYERS", "MODEL_DIM", "ITERATIONS"}
    assert build_local_dataset.quickstart_settings() == settings
    command = build_local_dataset.train_command("data/d", "data/t.model", 1024)
    words = command.replace("\\\n", " ").split()
    assert words[:3] == ["DATA_PATH=data/d", "TOKENIZER_PATH=data/t.model", "VOCAB_SIZE=1024"]
    assert words[3:-4] == settings and " ".join(words[-4:]) == build_local_dataset.TRAIN_LAUNCH
    assert all(len(line) <= 100 for line in command.splitlines()[1:])
    assert "scripts/quickstart.env" in (REPO / "scripts" / "quickstart.sh").read_text()


def quickstart_settings(**env) -> dict[str, str]:
    """The settings loop of quickstart.sh, run on its own in `env`: what it exports."""
    script = (REPO / "scripts" / "quickstart.sh").read_text()
    loop = script[script.index("while IFS=") : script.index("done <scripts/quickstart.env")]
    snippet = f"cd {REPO}\n{loop}done <scripts/quickstart.env\nenv"
    proc = subprocess.run(
        ["bash", "-c", snippet],
        capture_output=True,
        text=True,
        timeout=30,
        env={"PATH": "/usr/bin:/bin", **env},
    )
    assert proc.returncode == 0, proc.stderr
    return dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)


def test_quickstart_exports_the_settings_and_lets_the_environment_win():
    env = quickstart_settings(NUM_LAYERS="7")
    assert env["NUM_LAYERS"] == "7" and env["MODEL_DIM"] == "128" and env["ITERATIONS"] == "300"
    assert env["WARMDOWN_ITERS"] == "60"


def test_under_a_preset_the_quickstart_leaves_warmdown_iters_to_its_warmdown_frac():
    """Every preset's warm-down is WARMDOWN_FRAC, which replaces WARMDOWN_ITERS: the run's
    settings: line should not show a WARMDOWN_ITERS that decides nothing."""
    import train_gpt as tg

    assert all(float(p.get("WARMDOWN_FRAC", 0)) > 0 for p in tg.PRESETS.values())
    env = quickstart_settings(PRESET="frontier")
    assert "WARMDOWN_ITERS" not in env and env["ITERATIONS"] == "300"


@pytest.mark.parametrize("script", ["setup.sh", "quickstart.sh", "test.sh"])
def test_the_scripts_parse(script):
    proc = subprocess.run(["bash", "-n", str(REPO / "scripts" / script)], capture_output=True)
    assert proc.returncode == 0, proc.stderr


# Every Python file under benchmarks/ and tools/, a new one too: run from the repository root
# with --help it answers in one screen (at most 80 lines), exit 0; a
# program with its usage, a module by saying it is one and which program runs it.
PROGRAMS_AND_MODULES = sorted(
    p.relative_to(REPO).as_posix()
    for folder in ("benchmarks", "tools")
    for p in (REPO / folder).glob("*.py")
    if p.name != "__init__.py"
)


@pytest.mark.parametrize("path", PROGRAMS_AND_MODULES)
def test_every_file_of_benchmarks_and_tools_answers_help_from_the_root(path):
    proc = subprocess.run(
        [sys.executable, path, "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "COLUMNS": "100", "PYTHONDONTWRITEBYTECODE": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert 0 < len(lines) <= 80, proc.stdout
    module = f"{path}: a module, not a program"
    assert lines[0].startswith(("usage:", module)), lines[0]
    if lines[0].startswith(module):
        program = lines[1].removeprefix("Its benchmark: python ").removesuffix(" --help")
        assert (REPO / program).is_file() and program in PROGRAMS_AND_MODULES, lines[1]
