"""Every reference in the repository points inside it. The code, the tests, the tools and the
documents cite docs/ sections (`docs/frontier.md#the-artifact`), never a file a clone lacks, and
every cited `file.md#anchor` names a heading that exists, by GitHub's anchor rules. A self-test
plants one bad reference of each kind in a scratch tree and expects it to be caught."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TEXT = (".py", ".md", ".sh", ".env", ".toml", ".txt", ".cfg")
SKIP_DIRS = {".git", ".venv", "__pycache__", ".pytest_cache", ".ruff_cache", "logs", "fixtures"}
SKIP_FILES = {
    # names the outside files itself, to catch them in the documents (and its bogus lines)
    "tests/test_readme.py",
    # this file: its patterns and its self-test's planted lines
    "tests/test_docs_links.py",
}
SKIP_FOLDERS = ("data/datasets/", "data/tokenizers/")

# Fact sheets and notes that live beside the project, not in it, and their section numbers.
OUTSIDE = re.compile(
    r"\b(?:CHALLENGE|FRONTIER(?:_MAY)?|PRIOR_ART|STYLE)\.md\b"
    r"|\bFRONTIER(?:_MAY)? (?:§|\d)"
    r"|§\s?\d"
    r"|/work/"
    r"|\.\./shared\b"
)
CITED = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w.-]+\.md)#([\w-]+)")  # docs/x.md#anchor
LOCAL = re.compile(r"\]\(#([\w-]+)\)")  # a markdown link to a heading of the same document
FENCE = re.compile(r"^```.*?^```", re.M | re.S)


def anchor_of(heading: str) -> str:
    """GitHub's anchor: lower case, punctuation dropped (backticks too), spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#{1,6} (.+)$", FENCE.sub("", markdown), flags=re.M):
        slug = anchor_of(heading)
        seen[slug] = seen.get(slug, -1) + 1
        if seen[slug]:
            seen[f"{slug}-{seen[slug]}"] = 0  # a repeated heading: -1, -2, ...
    return set(seen)


def text_files(root: Path) -> list[Path]:
    found = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if any(part in SKIP_DIRS for part in path.relative_to(root).parts):
            continue
        if rel in SKIP_FILES or rel.startswith(SKIP_FOLDERS) or not path.is_file():
            continue
        if path.suffix in TEXT or rel == ".ci/run":
            found.append(path)
    return found


def outside_references(root: Path) -> list[str]:
    problems = []
    for path in text_files(root):
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            for hit in OUTSIDE.finditer(line):
                where = f"{path.relative_to(root).as_posix()}:{number}"
                problems.append(f"{where}: {hit.group(0)!r} is outside the repository")
    return problems


def broken_anchors(root: Path) -> list[str]:
    problems, cache = [], {}

    def headings(target: Path) -> set[str]:
        if target not in cache:
            cache[target] = anchors(target.read_text())
        return cache[target]

    for path in text_files(root):
        text, where = path.read_text(errors="replace"), path.relative_to(root).as_posix()
        for name, anchor in CITED.findall(text):
            # a path as the repository root reads it, or relative to the citing file (a link)
            target = next((p for p in (root / name, path.parent / name) if p.is_file()), None)
            if target is None:
                problems.append(f"{where}: {name}#{anchor}: no such file")
            elif anchor not in headings(target):
                problems.append(f"{where}: {name}#{anchor}: no heading with that anchor")
        if path.suffix == ".md":
            for anchor in LOCAL.findall(FENCE.sub("", text)):
                if anchor not in headings(path):
                    problems.append(f"{where}: #{anchor}: no heading with that anchor here")
    return problems


def test_nothing_cites_a_file_outside_the_repository():
    assert outside_references(REPO) == []


def test_every_cited_docs_section_exists():
    assert broken_anchors(REPO) == []


def test_docs_sections_cited_by_the_code_exist():
    """The anchors the code leans on most are real (a renamed heading breaks this first)."""
    frontier = anchors((REPO / "docs" / "frontier.md").read_text())
    evaluation = anchors((REPO / "docs" / "evaluation.md").read_text())
    assert {"the-records-network", "the-records-optimizer-and-schedule", "the-artifact"} <= frontier
    assert {"hessians", "gptq", "routing", "lqer", "code-bytes", "per-group-files"} <= frontier
    assert {"the-three-runs-settings", "their-training-levers"} <= frontier
    assert {"which-targets-are-scored", "the-may-records-ttt-levers"} <= evaluation


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("Test-time training (`EVAL_TTT`)", "test-time-training-eval_ttt"),
        ("The record's network", "the-records-network"),
        ("The #2135 evaluation, item by item", "the-2135-evaluation-item-by-item"),
        ("Sliding-window evaluation (CPU): `benchmarks/sliding.py`",
         "sliding-window-evaluation-cpu-benchmarksslidingpy"),
    ],
)  # fmt: skip
def test_anchors_follow_githubs_rules(heading, anchor):
    assert anchor_of(heading) == anchor


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("# as FRONTIER.md 4.2 says\n", "outside"),
        ("# the table of FRONTIER_MAY §1.17\n", "outside"),
        ('"""§2.3 item 4: the order."""\n', "outside"),
        ("# see ../shared/notes.md\n", "outside"),
        ("# docs/guide.md#intro\n", "no such file"),
        ("# docs/a.md#no-such-heading\n", "no heading"),
    ],
)
def test_a_planted_bad_reference_is_caught(tmp_path, line, expected):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A\n\n## The record's network\n\nSee [it](#a).\n")
    (tmp_path / "ok.py").write_text("# docs/a.md#the-records-network\n")
    assert outside_references(tmp_path) == broken_anchors(tmp_path) == []
    (tmp_path / "bad.py").write_text(line)
    found = outside_references(tmp_path) + broken_anchors(tmp_path)
    assert len(found) == 1 and expected in found[0], found
