"""docs/architecture.md, the map of train_gpt.py, stays true: every section it lists is one of the
script's, in the script's order, and every section of the script is listed; every name it cites
in backticks exists in the script (a module-level name, a class's method or attribute, a setting,
or a log label the script prints)."""

from __future__ import annotations

import ast
import re

import train_gpt as tg
from conftest import REPO

DOC = REPO / "docs" / "architecture.md"
SCRIPT = REPO / "train_gpt.py"
BANNER = "# -----------------------------"
IDENTIFIER = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


def script_sections() -> list[str]:
    lines = SCRIPT.read_text(encoding="utf-8").splitlines()
    return [
        lines[i + 1][2:]
        for i in range(len(lines) - 2)
        if lines[i] == BANNER and lines[i + 2] == BANNER
    ]


def doc_sections() -> list[str]:
    table = DOC.read_text(encoding="utf-8").split("## The sections")[1].split("\n## ")[0]
    return re.findall(r"^\| ([A-Z][A-Z -]+[A-Z]) \|", table, re.MULTILINE)


def class_members() -> dict[str, set[str]]:
    """Each class's methods, class attributes and the attributes its methods set on self."""
    members = {}
    for node in ast.parse(SCRIPT.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ClassDef):
            names = {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
            for n in ast.walk(node):
                if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name):
                    if n.value.id == "self" and isinstance(n.ctx, ast.Store):
                        names.add(n.attr)
                elif isinstance(n, (ast.AnnAssign, ast.Assign)):
                    targets = [n.target] if isinstance(n, ast.AnnAssign) else n.targets
                    names |= {t.id for t in targets if isinstance(t, ast.Name)}
            members[node.name] = names
    return members


def printed_strings() -> list[str]:
    """The script's string literals but its docstrings: its log lines' labels among them."""
    tree = ast.parse(SCRIPT.read_text(encoding="utf-8"))
    docstrings = {
        id(n.value)
        for n in ast.walk(tree)
        if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)
    }
    return [
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings
    ]


def exists(name: str, members: dict, strings: list[str]) -> bool:
    settings = {f.name.upper() for f in tg.FIELDS}
    word = re.compile(rf"(?<![\w.]){re.escape(name)}(?![\w])")
    if name in settings or any(word.search(s) for s in strings):
        return True
    first, *rest = name.split(".")
    if not hasattr(tg, first):
        return False
    if len(rest) == 1 and first in members and rest[0] in members[first]:
        return True
    obj = getattr(tg, first)
    for part in rest:
        if not hasattr(obj, part):
            return False
        obj = getattr(obj, part)
    return True


def cited_names() -> list[str]:
    cited = re.findall(r"`([^`]+)`", DOC.read_text(encoding="utf-8"))
    return [c for c in cited if IDENTIFIER.fullmatch(c)]


def test_the_map_lists_the_scripts_sections_in_order():
    ours = doc_sections()
    theirs = script_sections()
    assert len(ours) == len(theirs), (ours, theirs)
    for listed, title in zip(ours, theirs, strict=True):
        assert title.startswith(listed), (listed, title)


def test_every_name_the_map_cites_exists_in_the_script():
    members, strings = class_members(), printed_strings()
    cited = cited_names()
    assert len(cited) > 80  # (the map cites the script by name throughout)
    assert [name for name in cited if not exists(name, members, strings)] == []


def test_a_renamed_name_would_be_caught():
    members, strings = class_members(), printed_strings()
    assert not exists("Trainer.train_two_steps", members, strings)
    assert not exists("PrefetchingTokenLoader", members, strings)
    assert not exists("score_windows", members, strings)
    assert exists("quantized_ttt_phased", members, strings)  # a log label
    assert exists("TTTPlan.warmup_shapes", members, strings)  # set in __init__
    assert exists("Hyperparameters.from_env", members, strings)
