"""records/golf/shorten.py: a specialised script's parameters become positional-only where no
caller names them (the minifier then shortens them), and nowhere a caller could name them; the
attributes only its plain classes use on `self` get short names, and no other attribute does."""

from __future__ import annotations

import ast
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from records.golf.pack import minify_source  # noqa: E402
from records.golf.shorten import positional_parameters, short_attributes  # noqa: E402


def signatures(source: str) -> dict[str, tuple[list[str], list[str]]]:
    """{function name: (its positional-only parameters, its other positional ones)}; methods as
    Class.name."""
    tree = ast.parse(positional_parameters(textwrap.dedent(source)))
    out = {}
    for node in ast.walk(tree):
        owner = f"{node.name}." if isinstance(node, ast.ClassDef) else ""
        for stmt in (
            getattr(node, "body", []) if isinstance(node, (ast.Module, ast.ClassDef)) else []
        ):
            if isinstance(stmt, ast.FunctionDef):
                args = stmt.args
                out[owner + stmt.name] = (
                    [a.arg for a in args.posonlyargs],
                    [a.arg for a in args.args],
                )
    return out


def signatures_anywhere(source: str) -> dict[str, tuple[list[str], list[str]]]:
    """{function name: (positional-only, other positional)} of every def, nested ones too."""
    tree = ast.parse(positional_parameters(textwrap.dedent(source)))
    return {
        n.name: ([a.arg for a in n.args.posonlyargs], [a.arg for a in n.args.args])
        for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)
    }  # fmt: skip


def run(source: str) -> dict:
    namespace: dict = {}
    exec(compile(source, "<toy>", "exec"), namespace)  # (the toy source written above)
    return namespace["result"]


def test_parameters_no_call_names_become_positional_and_the_minifier_shortens_them():
    source = """
    def scaled(tokens_per_rank, grad_accum_steps):
        return tokens_per_rank * grad_accum_steps
    result = scaled(3, 4) + scaled(1, grad_accum_steps=2)
    """
    assert signatures(source)["scaled"] == (["tokens_per_rank"], ["grad_accum_steps"])
    shown = textwrap.dedent(source)
    packed = minify_source(positional_parameters(shown).encode(), renamed=True).decode()
    assert "tokens_per_rank" not in packed and "grad_accum_steps" in packed
    assert "tokens_per_rank" in minify_source(shown.encode(), renamed=True).decode()
    assert run(positional_parameters(shown)) == run(shown) == 14


def test_a_named_parameter_keeps_those_after_it_keyword_passable():
    source = """
    def f(a, b, c=3):
        return a + b + c
    result = f(1, b=2)
    """
    assert signatures(source)["f"] == (["a"], ["b", "c"])


def test_functions_others_could_call_stay_whole():
    source = """
    import functools, threading

    def callback(value):
        return value
    def spread(value):
        return value
    def strung(value):
        return value
    def wrapped(value):
        return value
    def partial_ok(value, scale):
        return value * scale
    def dunder_free(value):
        return value
    threading.Thread(target=callback, args=(1,))
    spread(**{"value": 1})
    getattr(__import__("sys"), "strung", None)
    wrapped = functools.lru_cache(wrapped)
    functools.partial(partial_ok, 2)(3)
    dunder_free(4)
    """
    sig = signatures(source)
    assert sig["callback"][0] == [] and sig["spread"][0] == [] and sig["strung"][0] == []
    assert sig["wrapped"][0] == []
    assert sig["partial_ok"][0] == ["value", "scale"] and sig["dunder_free"][0] == ["value"]


def test_a_method_counts_every_call_of_its_name_whatever_the_object():
    source = """
    class Loader:
        def next_batch(self, tokens, seq_len):
            return tokens // seq_len
        def state(self, verbose):
            return verbose
        def __repr__(self):
            return "Loader"
    class Other:
        def state(self, verbose):
            return verbose
    loader = Loader()
    loader.next_batch(8, 2)
    Other().state(verbose=True)
    """
    sig = signatures(source)
    assert sig["Loader.next_batch"] == (["self", "tokens", "seq_len"], [])
    assert sig["Loader.state"] == (["self"], ["verbose"])
    assert sig["Loader.__repr__"] == ([], ["self"])


def test_a_library_based_class_keeps_every_parameter_named_anywhere():
    source = """
    import torch
    class Net(torch.nn.Module):
        def forward(self, x, targets, hint=None):
            return x
        def helper(self, x, scale):
            return x * scale
    class Child(Net):
        def extra(self, x, targets):
            return x
    net = Net()
    net(1, 2, hint=None)
    torch.zeros(1).to(targets=None) if False else None
    """
    sig = signatures(source)
    assert sig["Net.forward"] == (["self", "x"], ["targets", "hint"])
    assert sig["Net.helper"] == (["self", "x", "scale"], [])
    assert sig["Child.extra"] == (["self", "x"], ["targets"])


def test_init_takes_its_class_calls_and_a_class_read_as_a_value_stays_whole():
    source = """
    class Plain:
        def __init__(self, width, depth):
            self.size = width * depth
    class Kept:
        def __init__(self, width):
            self.width = width
    class Table:
        def __init__(self, width):
            self.width = width
    Plain(2, depth=3)
    Kept(1)
    kinds = {"table": Table}
    result = Plain(2, 3).size + kinds["table"](width=4).width
    """
    sig = signatures(source)
    assert sig["Plain.__init__"] == (["self", "width"], ["depth"])
    assert sig["Kept.__init__"] == (["self", "width"], [])
    assert sig["Table.__init__"] == ([], ["self", "width"])
    assert run(positional_parameters(textwrap.dedent(source))) == 10


def test_a_classmethod_building_its_class_by_keyword_keeps_init_keyword_passable():
    source = """
    class Settings:
        def __init__(self, seed):
            self.seed = seed
        @classmethod
        def make(cls, seed):
            return cls(seed=seed)
    result = Settings(1).make(5).seed
    """
    sig = signatures(source)
    assert sig["Settings.__init__"] == (["self"], ["seed"])  # (cls(...) may build any class)
    assert sig["Settings.make"] == (["cls", "seed"], [])
    assert run(positional_parameters(textwrap.dedent(source))) == 5


def test_unknown_decorators_leave_a_function_whole():
    source = """
    import functools
    @functools.lru_cache
    def cached(n):
        return n
    @staticmethod
    def plain(n):
        return n
    cached(1)
    """
    sig = signatures(source)
    assert sig["cached"] == ([], ["n"]) and sig["plain"] == (["n"], [])


def attributes(source: str) -> set[str]:
    """Every attribute name of `source` after the renaming."""
    tree = ast.parse(short_attributes(textwrap.dedent(source)))
    return {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}


def test_an_attribute_only_used_on_self_in_a_plain_class_gets_a_short_name_and_still_works():
    source = """
    import contextlib
    class Clock(contextlib.AbstractContextManager):
        POLL_SECONDS = 2
        def __init__(self):
            self.elapsed_seconds = 0
        def tick_twice(self):
            for _ in range(2):
                self.advance()
            return self.elapsed_seconds
        def advance(self):
            self.elapsed_seconds += self.POLL_SECONDS
        def __exit__(self, *exc):
            self.elapsed_seconds = None
    result = Clock().tick_twice()
    """
    names = attributes(source)
    assert not names & {"elapsed_seconds", "POLL_SECONDS", "advance"}
    assert "tick_twice" in names  # (called on an object other than self)
    renamed = short_attributes(textwrap.dedent(source))
    assert run(renamed) == run(textwrap.dedent(source)) == 4


def test_attributes_others_could_read_keep_their_names():
    source = """
    import dataclasses, torch
    class Module(torch.nn.Module):  # a library base: state_dict names
        def __init__(self):
            super().__init__()
            self.weight_scale = 1.0
    class Shared:  # one attribute read from outside, one by a string
        def __init__(self):
            self.outside = 1
            self.by_name = 2
            self.inside = 3
    class Base:  # a subclass has a library base
        def __init__(self):
            self.under_library = 4
    class Later(Base, torch.nn.Module):
        pass
    class Fields:  # a field (annotation), its name bound in the class body
        width: int
        def __init__(self):
            self.width = 1
    class Peeks:  # self read by a computed name
        def __init__(self):
            self.computed = 2
        def peek(self, name):
            return getattr(self, name)
    @dataclasses.dataclass
    class Settings:  # a decorator
        seed: int = 1
        def doubled(self):
            self.cache = 2 * self.seed
    s = Shared()
    s.outside
    getattr(s, "by_name")
    """
    names = attributes(source)
    kept = {"weight_scale", "outside", "by_name", "under_library", "width", "computed", "cache"}
    assert kept <= names and "inside" not in names


def test_the_new_names_are_used_nowhere_in_the_source():
    source = """
    class Box:
        def __init__(self, a, b):
            self.first_value = a
            self.second_value = b
        def total(self):
            return self.first_value + self.second_value
    A = 1
    result = Box(1, 2).total() + A
    """
    new = attributes(source) - {"total"}
    assert len(new) == 2 and not new & {"a", "b", "A", "Box", "total", "result", "self"}
    assert run(short_attributes(textwrap.dedent(source))) == 4


def test_an_attribute_read_from_outside_or_by_a_string_still_reads_after_the_renaming():
    source = """
    class Shared:
        def __init__(self):
            self.outside = 1
            self.by_name = 2
    s = Shared()
    result = s.outside + getattr(s, "by_name")
    """
    assert run(short_attributes(textwrap.dedent(source))) == 3


def test_a_plain_class_with_a_decorated_subclass_keeps_its_names_and_nested_classes_theirs():
    source = """
    import types
    def tag(cls):
        return cls
    class Base:
        def __init__(self):
            self.shared = 1
    @tag
    class Child(Base):
        def read(self):
            return self.shared
    class Outer:
        def __init__(self):
            self.outer_only = 2
        def make(self):
            class Inner(types.SimpleNamespace):  # (its repr names its attributes)
                def __init__(self):
                    self.inner_only = 3
            return Inner()
    result = (Child().read(), repr(Outer().make()))
    """
    names = attributes(source)
    assert {"shared", "inner_only"} <= names and "outer_only" not in names
    assert run(short_attributes(textwrap.dedent(source))) == (1, "Inner(inner_only=3)")


def test_a_getattr_by_a_computed_name_of_another_object_turns_the_renaming_off():
    source = """
    import torch
    class Box:
        def __init__(self):
            self.width = 2
    field = "wid" + "th"
    setattr(torch, "x" + "y", 1) if False else None
    result = getattr(Box(), field)
    """
    assert short_attributes(textwrap.dedent(source)) == textwrap.dedent(source)
    assert run(short_attributes(textwrap.dedent(source))) == 2


@pytest.mark.parametrize(
    "persisting",
    [
        "result = sorted(Box().__dict__)",  # the hole: ['a'] after the renaming
        "import pickle\nsave = lambda box, file: pickle.dump(box, file)\nresult = 1",
        "import torch\nload = lambda path: torch.load(path, weights_only=False)\nresult = 1",
        "class Kept(Box):\n    def __getstate__(self):\n        return {}\nresult = 1",
    ],
)
def test_attributes_kept_by_their_names_as_data_keep_their_names(persisting):
    """An instance's `__dict__`, or a pickle of it (a checkpoint another form of the script
    loads), holds its attributes' names: renaming them changes what is read or loaded."""
    source = "class Box:\n    def __init__(self):\n        self.width = 2\n" + persisting + "\n"
    assert short_attributes(source) == source
    assert run(source)  # (a source that runs)


def test_a_class_defined_in_a_function_counts_as_having_a_library_base_when_it_has_a_base():
    source = """
    import types
    def build():
        class Net(types.SimpleNamespace):
            def forward(self, x, hint=None):
                return x
        return Net()
    net = build()
    net(1, hint=None) if False else None
    """
    assert signatures_anywhere(source)["forward"] == (["self", "x"], ["hint"])
