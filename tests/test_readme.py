"""The README and docs/ name only what exists. Everything is read from the documents themselves:
every environment variable (`NAME=...` or a backticked `NAME`), every path into the repository,
every command-line option (checked against its tool's --help), every log line and every link
they name must be found in the code. A self-test puts a bogus line of each kind into a copy of
the README and expects it to be caught."""

from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import functools
import importlib.util
import io
import os
import re
import runpy
import shlex
import sys
from pathlib import Path
from unittest import mock

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

DOCUMENTS = [
    REPO / "README.md",
    *sorted((REPO / "docs").glob("*.md")),
    REPO / "records" / "README.md",
    REPO / "benchmarks" / "RESULTS.md",
]

# Not ours, but a document may name them: variables of the libraries and the launcher, and the
# challenge repository's downloader, named to map it to ours.
NOT_OURS_VARIABLES = {"CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "CI"}  # CI: set by CI services
UPSTREAM_PATHS = {"data/cached_challenge_fineweb.py"}

OUR_FOLDERS = ("scripts", "data", "benchmarks", "records", "tools", "docs", "tests", ".ci")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
SPAN = re.compile(r"`((?:[^`\n]|\n(?!\s*\n))+)`")  # may wrap, within a paragraph
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
VARIABLE = r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*"
ASSIGNMENT = re.compile(rf"(?<![\w$./-])({VARIABLE})=")
PATH = re.compile(
    rf"(?<![\w./-])((?:{'|'.join(map(re.escape, OUR_FOLDERS))})/[^\s`'\"()\[\],;:|#]*)"
)
IDENTIFIER = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)+")  # snake_case, at least one underscore
LABEL = re.compile(r"([a-z][a-z0-9_]*):(?!//)")  # `step:…`, `val_loader:` (not a URL)
SEPARATORS = {";", "&&", "||", "|", "&", "do", "done", "then", "fi"}


# ---------------------------------------------------------------------------------------------
# what the code has
# ---------------------------------------------------------------------------------------------
def code_files() -> list[Path]:
    """Our .py and .sh files (and .ci/run), tests and the venv left out; the references the tests
    hold the script to (tests/reference/) are code the documents name."""
    found = [REPO / ".ci" / "run", *sorted((REPO / "tests" / "reference").glob("*.py"))]
    for root, dirs, files in os.walk(REPO):
        skip = {"__pycache__", *(("tests", "logs") if Path(root) == REPO else ())}
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in skip]
        found += [Path(root) / f for f in files if f.endswith((".py", ".sh"))]
    return [p for p in found if p.is_file()]


@functools.cache
def code_text() -> str:
    return "\n".join(p.read_text(encoding="utf-8", errors="replace") for p in code_files())


@functools.cache
def known_variables() -> frozenset[str]:
    """train_gpt.py's Hyperparameters fields, and what the scripts and tools read."""
    import train_gpt

    names = {f.name.upper() for f in dataclasses.fields(train_gpt.Hyperparameters)}
    names |= set(train_gpt.FIXED_VARIABLES)  # read only to be refused unless at a fixed value
    text = code_text()
    read = r"(?:environ\.get|environ\[|getenv|env_int)\(?\s*[\"'](" + VARIABLE + r")[\"']"
    names |= set(re.findall(read, text))  # Python
    names |= set(re.findall(r"\$\{(" + VARIABLE + r")[:}-]", text))  # shell: ${NAME:-default}
    return frozenset(names | NOT_OURS_VARIABLES)


@functools.cache
def composed_suffixes() -> frozenset[str]:
    """Suffixes the code appends to a name in an f-string: f"{label}_exact", f"{phase}_ms:"."""
    return frozenset(re.findall(r"\}(_[a-z][a-z0-9_]*)", code_text()))


def in_code(name: str) -> bool:
    """A name the code writes, literally or composed (final_sliding_window_eval + _exact)."""
    text = code_text()
    if re.search(rf"\b{re.escape(name)}\b", text):
        return True
    return any(
        name.endswith(suffix) and re.search(rf"\b{re.escape(name[: -len(suffix)])}\b", text)
        for suffix in composed_suffixes()
        if len(name) > len(suffix)
    )


@functools.cache
def gitignore_patterns() -> tuple[str, ...]:
    lines = (REPO / ".gitignore").read_text().splitlines()
    return tuple(x.strip() for x in lines if x.strip() and not x.startswith("#"))


def generated(path: str) -> bool:
    """Under a git-ignored location: something the tools write (data/datasets/..., logs/...)."""
    parts = path.strip("/").split("/")
    for pattern in gitignore_patterns():
        core = pattern.strip("/")
        if "/" in core or pattern.startswith("/"):  # anchored at the repository root
            hits = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        else:
            hits = parts
        if any(fnmatch.fnmatch(hit, core) for hit in hits):
            return True
    return False


@functools.cache
def record_tracks() -> frozenset[str]:
    from records.golf.rules import TRACKS

    return frozenset(TRACKS.values())


def path_exists(path: str) -> bool:
    path = path.rstrip(".,:;")
    if path in UPSTREAM_PATHS or generated(path):
        return True
    parts = path.strip("/").split("/")
    if parts[0] == "records" and len(parts) > 1 and parts[1] in record_tracks():
        return True  # a record folder, which `new` creates
    if any(c in path for c in "*?["):
        return any(REPO.glob(path.strip("/")))
    return (REPO / path).exists()


@functools.cache
def tool_help(tool: str, command: str | None = None) -> str:
    """What `python TOOL [COMMAND] --help` prints; for torchrun, its argparse source."""
    if tool == "torchrun":
        spec = importlib.util.find_spec("torch")  # finds torch without importing it
        if spec is None or not spec.submodule_search_locations:
            pytest.skip("torch is not installed: torchrun's options cannot be read")
        run = Path(spec.submodule_search_locations[0]) / "distributed" / "run.py"
        return run.read_text(encoding="utf-8")
    # Run here as `python TOOL` would (its folder first on sys.path, __name__ == "__main__"): a
    # tool's --help imports nothing heavy (tests/test_cli.py runs each in a process of its own),
    # and a process per tool here would cost a Python start-up each.
    script = REPO / tool
    argv = [str(script), *([command] if command else []), "--help"]
    printed = io.StringIO()
    with (
        mock.patch.object(sys, "argv", argv),
        mock.patch.object(sys, "path", [str(script.parent), *sys.path]),
        mock.patch.dict(os.environ, {"COLUMNS": "80"}),
        contextlib.redirect_stdout(printed),
        pytest.raises(SystemExit) as end,
    ):
        runpy.run_path(str(script), run_name="__main__")
    assert end.value.code in (0, None), f"{' '.join(argv)}: exit {end.value.code}"
    return printed.getvalue()


def tool_options(tool: str, command: str | None = None) -> set[str]:
    return set(re.findall(r"--[A-Za-z0-9][\w-]*", tool_help(tool, command)))


def subcommands(tool: str) -> set[str]:
    if tool == "torchrun":
        return set()
    usage = re.search(r"\{([\w,-]+)\}", tool_help(tool))
    return set(usage.group(1).split(",")) if usage else set()


# ---------------------------------------------------------------------------------------------
# what a document names
# ---------------------------------------------------------------------------------------------
@dataclasses.dataclass
class Document:
    path: Path
    text: str

    @property
    def blocks(self) -> list[tuple[str, str]]:  # (language, body) of each fenced block
        return FENCE.findall(self.text)

    @property
    def prose(self) -> str:
        return FENCE.sub("", self.text)

    @property
    def spans(self) -> list[str]:
        return [" ".join(span.split()) for span in SPAN.findall(self.prose)]


def read(path: Path) -> Document:
    return Document(path, path.read_text(encoding="utf-8"))


def shell_words(line: str) -> list[str]:
    lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split, lexer.commenters = True, "#"
    try:
        return list(lexer)
    except ValueError:  # an unbalanced quote in prose
        return line.split()


def commands(doc: Document) -> list[tuple[list[str], bool]]:
    """(words, from a shell block) of every command in a shell block and of every span."""
    found = []
    for language, body in doc.blocks:
        if language in ("bash", "sh", "shell"):
            for line in body.replace("\\\n", " ").splitlines():
                found.append((shell_words(line), True))
    found += [(shell_words(span), False) for span in doc.spans]
    return found


def module_constant(name: str) -> bool:
    """A name of train_gpt.py's, or of the specialiser's tables (the docs name both)."""
    import train_gpt
    from records.golf import specialize

    return hasattr(train_gpt, name) or hasattr(specialize, name)


def variable_problems(doc: Document) -> list[str]:
    named = set(ASSIGNMENT.findall(doc.text))
    # a backticked NAME_WITH_UNDERSCORES, or any backticked NAME that opens a table row (SEED):
    # a lone word (`WARN`, `FAIL`) is a word
    named |= {s for s in doc.spans if re.fullmatch(VARIABLE, s) and "_" in s}
    named |= set(re.findall(rf"^\| `({VARIABLE})` \|", doc.prose, flags=re.M))
    missing = named - known_variables()
    missing = {n for n in missing if not module_constant(n)}  # a name of the code, not a variable
    return [
        f"environment variable {n}: read by no code (not a Hyperparameters field)" for n in missing
    ]


def path_problems(doc: Document) -> list[str]:
    return [
        f"path {p}: no such file" for p in sorted(set(PATH.findall(doc.text))) if not path_exists(p)
    ]


def link_problems(doc: Document) -> list[str]:
    problems = []
    for target in LINK.findall(doc.prose):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        where = (doc.path.parent / file).resolve() if file else doc.path
        if not where.exists():
            problems.append(f"link {target}: no such file")
        elif anchor and where.suffix == ".md" and anchor not in anchors(where.read_text()):
            problems.append(f"link {target}: no heading with that anchor in {file or 'itself'}")
    return problems


def anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens, -1 -2 ..."""
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#+ (.+)$", FENCE.sub("", markdown), flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        seen[slug] = seen.get(slug, -1) + 1
        if seen[slug]:
            seen[f"{slug}-{seen[slug]}"] = 0
    return set(seen)


def option_uses(words: list[str], in_shell: bool):
    """(tool, the word after it, option) for every --option. Its tool is the nearest torchrun
    or the first .py after it in its command (a later .py is the tool's argument: `pack
    train_gpt.py -o packed/train_gpt.py`); in a shell block, another
    program (git, ls, bash, python -m ...) owns the options after it (tool None, not checked);
    in prose, an option with no tool before it has tool ""."""
    no_tool = None if in_shell else ""
    owner, after, start = no_tool, "", True
    for i, word in enumerate(words):
        if word in SEPARATORS or word == "--":  # `tool -- command`: the command's own words
            owner, after, start = no_tool, "", True
            continue
        if word.startswith("--"):
            yield owner, after, word.split("=", 1)[0]
        elif word.rsplit("/", 1)[-1] == "torchrun":
            owner, after = "torchrun", ""
        elif word.endswith(".py") and not str(owner).endswith(".py"):  # not a tool's argument
            owner, after = word.removeprefix("./"), words[i + 1] if i + 1 < len(words) else ""
        elif start and in_shell and not word.startswith("-") and not ASSIGNMENT.match(word):
            owner = None
        start = start and bool(ASSIGNMENT.match(word))


def is_tool(owner: str) -> bool:
    return owner == "torchrun" or (owner != "train_gpt.py" and (REPO / owner).is_file())


def option_problems(doc: Document) -> list[str]:
    problems, loose, tools = [], [], set()
    for words, in_shell in commands(doc):
        for owner, after, option in option_uses(words, in_shell):
            if owner is None or owner in UPSTREAM_PATHS:
                continue
            if owner == "":
                loose.append(option)
                continue
            tools.add(owner)
            if owner == "train_gpt.py":
                if option not in ("--help", "-h"):  # its only options: the list of settings
                    problems.append(f"option {option}: train_gpt.py takes no options")
            elif not is_tool(owner):
                problems.append(f"option {option}: {owner} is not a tool of this repository")
            elif option != "--help":
                command = after if after in subcommands(owner) else None
                if option not in tool_options(owner, command):
                    named = " ".join(filter(None, (owner, command)))
                    problems.append(f"option {option}: not in {named} --help")
    if loose:  # named on its own: it must be an option of a tool that the document runs
        known = {"--help"}
        for tool in filter(is_tool, tools):
            known |= tool_options(tool)
            for command in subcommands(tool):
                known |= tool_options(tool, command)
        for option in loose:
            if option not in known:
                problems.append(f"option {option}: in none of {sorted(tools)} --help")
    return problems


def log_problems(doc: Document) -> list[str]:
    """Log lines and names of the code: the label a span or log excerpt starts with."""
    problems = []
    lines = [(s, True) for s in doc.spans]
    lines += [
        (line, False) for lang, body in doc.blocks if lang == "text" for line in body.splitlines()
    ]
    for line, is_span in lines:
        words = line.split()
        if not words:
            continue
        first, label = words[0], None
        fields = re.search(r"[:…]", line)  # a log line's key:value fields
        if IDENTIFIER.fullmatch(line) or (IDENTIFIER.fullmatch(first) and fields):
            label = first  # `timing_summary`, `final_sliding_window_eval stride:64 …`
        elif m := LABEL.match(first):
            label = m.group(1)  # `step:… train_loss:…`, `val_loader:`
        elif is_span and re.fullmatch(r"[A-Za-z][\w +:-]* ….*", line):
            prefix = line.split(" …")[0]  # `Serialized model int8+zlib: …`: the text before …
            if prefix not in code_text():
                problems.append(f"log line {line!r}: no code prints {prefix!r}")
            continue
        if label and not in_code(label):
            problems.append(f"log line or name {line!r}: {label} is not in the code")
    return problems


def elsewhere_problems(doc: Document) -> list[str]:
    """Nothing a user of a clone lacks, and no story of how the project was made."""
    history = (
        r"\.\./shared|/work/|\bissue \d+|CHALLENGE\.md|\blent to\b|\b(?:this|other) sessions?\b"
    )
    found = re.findall(history, doc.text, flags=re.I)
    return [f"refers to {x!r}: outside the repository or the project's history" for x in found]


CHECKS = [
    variable_problems,
    path_problems,
    link_problems,
    option_problems,
    log_problems,
    elsewhere_problems,
]


def problems_of(doc: Document) -> list[str]:
    return [problem for check in CHECKS for problem in check(doc)]


# ---------------------------------------------------------------------------------------------
# the tests
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", DOCUMENTS, ids=[p.relative_to(REPO).as_posix() for p in DOCUMENTS])
@pytest.mark.parametrize(
    "check", CHECKS, ids=[c.__name__.removesuffix("_problems") for c in CHECKS]
)
def test_the_document_names_only_what_exists(path, check):
    assert check(read(path)) == []


def test_the_quick_start_is_two_commands_and_ci_runs_the_second():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    start = re.search(r"^#+ .*quick ?start.*$", text, flags=re.I | re.M)
    assert start, "README.md has no Quick start section"
    block = FENCE.search(text, start.end())
    lines = [line.split("#")[0].strip() for line in block.group(2).splitlines()]
    assert [line for line in lines if line] == [
        "bash scripts/quickstart.sh",
        "bash scripts/test.sh",
    ]
    assert "scripts/test.sh" in (REPO / ".ci" / "run").read_text()


def test_the_readme_is_short():
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines: move details to docs/"


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("Train deeper with `NUM_LAYER=12`.", "environment variable NUM_LAYER"),
        ("See `EVAL_STRIDES`.", "environment variable EVAL_STRIDES"),
        ("| `SEEDS` | 3 | seeds |", "environment variable SEEDS"),
        ("Then run `bash scripts/quickstrt.sh`.", "path scripts/quickstrt.sh"),
        ("More in [the guide](docs/guide.md).", "docs/guide.md"),
        ("Read [this](README.md#no-such-section).", "no heading"),
        (
            "```bash\n.venv/bin/python data/download_fineweb.py --shards 3\n```",
            "option --shards: not in data/download_fineweb.py --help",
        ),
        (
            "```bash\n.venv/bin/python records/submission.py check --verbose x\n```",
            "option --verbose: not in records/submission.py check --help",
        ),
        ("```bash\n.venv/bin/torchrun --nproc 8 train_gpt.py\n```", "option --nproc: not in"),
        ("```bash\n.venv/bin/torchrun train_gpt.py --seed 1\n```", "takes no options"),
        ("Pass `--records-folder`.", "option --records-folder: in none of"),
        ("It ends with `final_int9_roundtrip_exact val_loss:…`.", "final_int9_roundtrip_exact"),
        ("The `train_loader_v2:` line.", "train_loader_v2"),
        ("The `Serialised model: …` line.", "Serialised model:"),
        ("Then `peak memory use …`.", "peak memory use"),
        ("As in ../shared/notes.md.", "../shared"),
        ("Measured on the machine lent to us.", "lent to"),
    ],
)
def test_a_bogus_line_in_the_readme_is_caught(line, expected):
    readme = read(REPO / "README.md")
    doc = Document(readme.path, readme.text + "\n" + line + "\n")
    new = [problem for problem in problems_of(doc) if problem not in problems_of(readme)]
    assert new and all(expected in problem for problem in new), new


def test_the_readme_says_what_a_doc_masked_sliding_evaluation_does():
    """VAL_DOC_ATTENTION=1 with EVAL_STRIDE runs (the windows attend across documents; the mask
    is the plain evaluation's): the README says so, not that it is refused."""
    import train_gpt as tg

    env = {"RUN_ID": "r", "VAL_DOC_ATTENTION": "1", "EVAL_STRIDE": "64"}
    cfg = tg.Hyperparameters.from_env(env, 8)
    assert cfg.val_doc_attention and cfg.eval_stride == 64
    text = " ".join((REPO / "README.md").read_text().split())
    assert "`VAL_DOC_ATTENTION=1` with `EVAL_STRIDE` is refused" not in text
    assert "also with `VAL_DOC_ATTENTION=1` (which masks the plain evaluation only)" in text


def test_the_readme_gives_the_quick_starts_score_as_a_range_and_the_fingerprint():
    """One Python version gave several scores (the code and the machine differ too): the README
    gives a range and the run's data_fingerprint line, not one score per Python version."""
    text = " ".join((REPO / "README.md").read_text().split())
    assert "with Python 3.11.7, 1.97333206 with 3.11.2" not in text
    assert "expect 2.0 ± 0.05" in text and "`data_fingerprint:`" in text
