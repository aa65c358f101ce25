"""The specialiser's folding and pruning (records/golf/fold.py, specialize.py) leave alone what they
cannot prove: each program here once came out of `fold_to_fixpoint` computing something else (a
review's finds, each confirmed by running both). Every test runs the program as written and as
specialised and expects the same output, or the same exception."""

from __future__ import annotations

import ast
import contextlib
import io
import sys
import textwrap
import types
import warnings
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from records.golf import specialize as sp  # noqa: E402


def outcome(source: str) -> str:
    """What running `source` as a module prints, then the exception it ends with, if any."""
    out = io.StringIO()
    module = types.ModuleType("toy")
    with contextlib.redirect_stdout(out), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (`x is 1000`'s SyntaxWarning)
        try:
            exec(compile(source, "toy.py", "exec"), module.__dict__)
        except Exception as e:  # (the outcome is the exception's type)
            print(f"raised {type(e).__name__}")
    return out.getvalue()


def specialised(source: str) -> str:
    """`source` through every folding pass and the pruning, to their fixpoint, as a script's."""
    module = types.ModuleType("toy")  # (its classes, for their library ancestors' members)
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with contextlib.suppress(Exception):
            exec(compile(source, "toy.py", "exec"), module.__dict__)
    settings = types.SimpleNamespace(file_calls={}, inherited=sp.inherited_members(module))
    return ast.unparse(sp.fold_to_fixpoint(ast.parse(source), settings))


def assert_same(source: str) -> str:
    source = textwrap.dedent(source)
    folded = specialised(source)
    assert outcome(folded) == outcome(source), folded
    return folded


# -----------------------------
# CONSTANTS
# -----------------------------


def test_a_negative_constant_keeps_its_sign_under_a_power_or_an_attribute():
    assert_same("""
        def f(y):
            return (-5) ** y, (-2.5) ** y, (-0.0) ** y, (-5).bit_length(), (-5).real
        print(f(2))
    """)


def test_identity_of_equal_constants_is_left_to_python_and_of_none_folds():
    folded = assert_same("""
        def f(a):
            return (1, 2) is (1, 2), 1000 is not 1000, 5 is None, a
        print(f(0))
    """)
    assert "(1, 2) is (1, 2)" in folded and "5 is None" not in folded


def test_a_builtin_bound_in_a_function_is_not_the_builtin():
    assert_same("""
        def f(len):
            return len("abc")
        def g():
            abs = lambda v: "mine"
            return abs(-1)
        print(f(lambda s: 0), g())
    """)


# -----------------------------
# MODULE TABLES
# -----------------------------


@pytest.mark.parametrize(
    "program",
    [
        # a parameter of the reading function has the table's name
        'TABLE = {"a": 1}\ndef f(TABLE):\n    return TABLE["a"]\nprint(f({"a": 2}))',
        # the module binds it again, with |=
        'TABLE = {"a": 1}\nTABLE |= {"a": 2}\nprint(TABLE["a"])',
        # a value of it is changed in place
        'T = {"a": {"b": 1}}\nT["a"]["b"] = 5\nprint(T["a"]["b"])',
        'T = {"a": [1]}\nT["a"].append(2)\nprint(T["a"])',
        # a name as its value is bound again after the table was built
        'x = 1\nT = {"a": x}\nx = 2\nprint(T["a"])',
        'x = 1\nT = {"a": x}\ndef f(x):\n    return T["a"]\nprint(f(3))',
        # a key written twice: the dict holds the last
        'T = {"a": 1, "a": 2}\nprint(T["a"], T.get("a"))',
    ],
)
def test_a_module_table_folds_only_where_its_value_is_the_one_written(program):
    assert_same(program)


def test_a_function_returning_a_constant_folds_only_where_its_name_means_it():
    assert_same("""
        def f():
            return 1
        f = lambda: 2
        def one():
            return 1
        def g(one):
            return one()
        try:
            one(3)
        except TypeError:
            print("TypeError")
        print(f(), g(lambda: 9), one())
    """)


# -----------------------------
# DEAD CODE
# -----------------------------


def test_code_after_a_with_that_returns_stays_the_context_may_swallow_the_exception():
    assert_same("""
        import contextlib
        def f(s):
            with contextlib.suppress(ValueError):
                v = int(s)
                return v
            return "fallback"
        print(f("x"), f("3"))
    """)


# -----------------------------
# PRUNING
# -----------------------------


@pytest.mark.parametrize(
    "program",
    [
        # a global written with += inside a function is that function's
        "calls = 0\ndef tick():\n    global calls\n    calls += 1\ntick()\nprint('ok')",
        # a class attribute read by bare name in the class body
        "class C:\n    SCALE = 2\n    DOUBLE = SCALE * 2\nprint(C().DOUBLE)",
        "class P:\n    def get_width(self):\n        return 3\n    width = property(get_width)\n"
        "print(P().width)",
        "class Q:\n    LIMIT = 4\n    def f(self, n=LIMIT):\n        return n\nprint(Q().f())",
        # a star import binds names it does not write
        "from math import *\nprint(sqrt(16.0))",
        # an Enum's members are read by its metaclass
        "import enum\nclass Color(enum.Enum):\n    RED = 1\n    GREEN = 2\nprint(list(Color))",
        # print calls a file's write, ** a mapping's keys
        "class Sink:\n    def __init__(self):\n        self.parts = []\n"
        "    def write(self, s):\n        self.parts.append(s)\n"
        "sink = Sink()\nprint('hi', file=sink)\nprint(sink.parts)",
        "class M:\n    def keys(self):\n        return ['a']\n    def __getitem__(self, k):\n"
        "        return 1\ndef show(**kw):\n    return kw\nprint(show(**M()))",
    ],
)
def test_what_code_reaches_without_naming_it_as_an_attribute_is_kept(program):
    assert_same(program)


@pytest.mark.parametrize(
    "program",
    [
        # dead code after a return still makes a generator, or a local
        "def f():\n    return 5\n    yield\nprint(type(f()).__name__)",
        "def g():\n    if False:\n        yield 1\nprint(list(g()))",
        "x = 'global'\ndef h():\n    print(x)\n    if False:\n        x = 2\nh()",
        # a finally left empty
        "def f():\n    try:\n        return 1\n    finally:\n"
        "        if False:\n            print(0)\nprint(f())",
    ],
)
def test_dead_code_goes_only_where_the_function_stays_what_it_was(program):
    assert_same(program)


@pytest.mark.parametrize(
    "program",
    [
        # the second value calls a function that reads the first
        "def g():\n    return x + 1\nx = 1\nx = g()\nprint(x)",
        "class C:\n    def __init__(self):\n        self.n = 10\n        self.n = self.double()\n"
        "    def double(self):\n        return self.n * 2\nprint(C().n)",
        # a local a nested function reads
        "def f():\n    def inner():\n        return x\n    x = 1\n    x = inner() + 1\n"
        "    return x\nprint(f())",
    ],
)
def test_a_store_overwritten_at_once_stays_when_the_next_value_may_read_it(program):
    assert_same(program)


def test_a_check_s_message_is_dropped_only_when_building_it_calls_nothing():
    assert_same("""
        def log(text):
            print("built", text)
            return text
        def validate(n):
            checks = [(False, "A", log("want A")), (n < 0, "N", ">= 0")]
            return [f"{name}: {want}" for broken, name, want in checks if broken]
        print(validate(-1))
    """)


@pytest.mark.parametrize(
    "program",
    [
        # a table whose value is a list may be changed in place
        'def f():\n    t = {"a": [1]}\n    t["a"].append(2)\n    return t["a"]\nprint(f())',
        # a nested function's table is not the outer function's name
        't = {"a": 2}\ndef outer():\n    def inner():\n        t = {"a": 1}\n'
        '        return t["a"]\n    return inner(), t["a"]\nprint(outer())',
    ],
)
def test_a_local_table_folds_only_when_it_is_the_function_s_own_and_immutable(program):
    assert_same(program)


@pytest.mark.parametrize(
    "program",
    [
        # `del x` needs x bound
        "def f():\n    x = 1\n    del x\n    return 'ok'\nprint(f())",
        # a class body's names are its attributes
        "def f():\n    class C:\n        x = 1\n    return C.x\nprint(f())",
        # locals() reads every local
        "def f():\n    x = 1\n    return sorted(locals())\nprint(f())",
    ],
)
def test_a_local_no_code_reads_goes_only_when_nothing_sees_it(program):
    assert_same(program)


@pytest.mark.parametrize(
    "program",
    [
        # a match's capture, an import, an except clause bind the name too
        "def f(v):\n    x = 1\n    match v:\n        case [x]:\n            pass\n    return x\n"
        "print(f([7]))",
        "def f():\n    x = 1\n    import os.path as x\n    return x.__name__\nprint(f())",
        "def f():\n    x = 1\n    try:\n        raise ValueError\n    except ValueError as x:\n"
        "        pass\n    return x\nprint(f())",
    ],
)
def test_a_constant_local_is_inlined_only_when_nothing_else_binds_its_name(program):
    assert_same(program)


@pytest.mark.parametrize(
    "program",
    [
        # a starred target: the positions after it count from the end
        "def g(n):\n    return (n, 2, 3)\ndef f():\n    *a, c = g(1)\n    return c\nprint(f())",
        # a decorated function returns what its wrapper does
        "def rev(fn):\n    return lambda n: fn(n)[::-1]\n@rev\ndef g(n):\n    return (n, 2)\n"
        "def f():\n    a, b = g(9)\n    return b\nprint(f())",
        # a parameter of the caller has the function's name
        "def g():\n    return (1, 2)\ndef f(g):\n    a, b = g()\n    return b\n"
        "print(f(lambda: (3, 4)))",
    ],
)
def test_the_constant_part_of_a_return_is_inlined_only_for_that_function(program):
    assert_same(program)


def test_a_hook_a_subclass_sets_in_its_body_is_still_called():
    assert_same("""
        def loud(self):
            print("loud step")
        class Base:
            def on_step(self):
                pass
            def run(self):
                self.on_step()
                return "ran"
        class B(Base):
            on_step = loud
        print(B().run())
    """)


# -----------------------------
# ATTRIBUTES AND ARGUMENTS
# -----------------------------


@pytest.mark.parametrize(
    "program",
    [
        # __init__ may return before the store: the class attribute is read then
        "class A:\n    x = 0\n    def __init__(self, fast):\n        if fast:\n            return\n"
        "        self.x = 1\n    def get(self):\n        return self.x\n"
        "print(A(True).get(), A(False).get())",
        # a method __init__ calls reads it before the store
        "class A:\n    def __init__(self):\n        self.log = self.show()\n        self.x = 1\n"
        "    def show(self):\n        try:\n            return self.x\n"
        "        except AttributeError:\n            return 'unset'\nprint(A().log)",
        # a subclass skips the base's __init__
        "class A:\n    def __init__(self):\n        self.x = 1\n    def get(self):\n"
        "        return self.x\nclass B(A):\n    x = 5\n    def __init__(self):\n        pass\n"
        "print(B().get(), A().get())",
        # its attributes reached as a dict
        "class A:\n    def __init__(self):\n        self.x = 1\n    def get(self):\n"
        "        return self.x\na = A()\nvars(a).update(x=2)\nprint(a.get())",
    ],
)
def test_an_attribute_set_once_in_init_is_a_constant_only_when_every_method_sees_it(program):
    assert_same(program)


@pytest.mark.parametrize(
    "program",
    [
        # a class attribute or a method answers hasattr too
        "class A:\n    limit = 3\n    def reset(self):\n        pass\n    def ask(self):\n"
        "        return hasattr(self, 'limit'), hasattr(self, 'reset')\nprint(A().ask())",
        # asked in __init__ before the store
        "class A:\n    def __init__(self):\n        self.had = hasattr(self, 'x')\n"
        "        self.x = 1\nprint(A().had)",
        # asked by a method __init__ calls before the store
        "class A:\n    def __init__(self):\n        self.had = self.check()\n        self.x = 1\n"
        "    def check(self):\n        return hasattr(self, 'x')\nprint(A().had)",
        # deleted by delattr
        "class A:\n    def __init__(self):\n        self.x = 1\n    def drop(self):\n"
        "        delattr(self, 'x')\n        return hasattr(self, 'x')\nprint(A().drop())",
        # a subclass that does not store it
        "class A:\n    def __init__(self):\n        self.x = 1\n    def ask(self):\n"
        "        return hasattr(self, 'x')\nclass B(A):\n    def __init__(self):\n        pass\n"
        "print(A().ask(), B().ask())",
    ],
)
def test_hasattr_folds_only_to_what_every_instance_answers(program):
    assert_same(program)


@pytest.mark.parametrize(
    "program",
    [
        # an instance built by cls(...) in a class method passes no keyword
        "class A:\n    def __init__(self, *, n=1):\n        self.n = n\n    @classmethod\n"
        "    def fresh(cls):\n        return cls()\na = A(n=2)\nprint(a.n, a.fresh().n)",
        # type(self)(...) builds one unseen
        "class P:\n    def __init__(self, x=1):\n        self.x = x\n    def copy(self):\n"
        "        return type(self)(self.x + 1)\nprint(P(1).copy().x)",
        # a nested def or an import of the function's name is another function
        "def f(x):\n    return x\ndef g():\n    def f(a, b):\n        return a * b\n"
        "    return f(1, 5)\nprint(f(1), g())",
        # a decorator's wrapper calls it otherwise
        "def with_ten(fn):\n    return lambda: fn(10)\n@with_ten\ndef f(x=1):\n    return x\n"
        "print(f())",
        # a default that is never used is still computed when the class is defined
        "def make():\n    print('made')\n    return 3\nclass A:\n"
        "    def __init__(self, *, size=make()):\n        self.size = size\nprint(A(size=1).size)",
        # a module-level += binds a table's field again
        "import dataclasses\n@dataclasses.dataclass(frozen=True)\nclass Row:\n    n: int\n"
        "LIMIT = 1\nTABLE = {'a': Row(LIMIT)}\nLIMIT += 1\nprint(TABLE['a'].n, LIMIT)",
    ],
)
def test_a_parameter_or_field_is_a_constant_only_when_every_call_is_in_sight(program):
    assert_same(program)


def test_a_definition_a_decorator_may_register_is_kept_though_unused():
    assert_same("""
        REGISTRY = []
        def register(fn):
            REGISTRY.append(fn.__name__)
            return fn
        @register
        def greet():
            pass
        print(REGISTRY)
    """)


# -----------------------------
# WHAT NO PASS MODELS: REFUSED
# -----------------------------


@pytest.mark.parametrize(
    ("program", "what"),
    [
        ("p = 1\nprint(eval('p + 1'))", "eval runs code from text"),
        ("print(globals()['x'])", "globals looks names up by text"),
        ("import operator\nf = operator.attrgetter('inner.value')", "attrgetter"),
        ("def f(o, name):\n    return getattr(o, 'do_' + name)(steps=4)", "computed name"),
        ("def f(v):\n    match v:\n        case P(kind='a'):\n            return 1", "match"),
        ("class P:\n    def __getattr__(self, name):\n        return 0", "__getattr__"),
        ("class D:\n    def __set_name__(self, owner, name):\n        pass", "__set_name__"),
        ("class B:\n    def __init_subclass__(cls):\n        pass", "__init_subclass__"),
        ("class C(metaclass=Meta):\n    pass", "metaclass"),
        ("def f(p):\n    return '{0.width}'.format(p)", "format string"),
        ("import functools\n@functools.singledispatch\ndef f(x):\n    pass", "singledispatch"),
    ],
)
def test_what_reaches_names_by_text_is_refused_naming_its_line(program, what):
    with pytest.raises(sp.SubmissionError, match=rf"line \d+: [^;]*{what}"):
        sp.check_modelled(ast.parse(program))


def test_the_readable_script_uses_nothing_the_passes_do_not_model():
    sp.check_modelled(ast.parse((REPO / "train_gpt.py").read_text(encoding="utf-8")))
