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

from records.golf.errors import MissingPackage  # noqa: E402
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
    assert sig["partial_ok"][0] == ["value"] and sig["dunder_free"][0] == ["value"]


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


def test_what_a_library_base_defines_keeps_its_keywords_and_the_rest_follows_our_calls():
    source = """
    import torch
    class Net(torch.nn.Module):
        def forward(self, x, targets, hint=None):
            return x
        def state_dict(self, destination=None, prefix="", keep_vars=False):
            return {}
        def helper(self, x, scale):
            return x * scale
    class Child(Net):
        def extra(self, x, targets):
            return x
    class Unread(make_base()):
        def method(self, a):
            return a
    net = Net()
    net(1, 2, hint=None)
    net.helper(1, 2)
    Child().extra(1, 2)
    """
    sig = signatures(source)
    # the library calls state_dict with keywords of its own; forward with our calls' (net(...))
    assert sig["Net.state_dict"] == (["self"], ["destination", "prefix", "keep_vars"])
    assert sig["Net.forward"] == (["self", "x", "targets"], ["hint"])
    # no library base defines these: only our calls name their parameters
    assert sig["Net.helper"] == (["self", "x", "scale"], [])
    assert sig["Child.extra"] == (["self", "x", "targets"], [])
    # a base that cannot be read: any method may be the library's
    assert sig["Unread.method"] == (["self"], ["a"])


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


def test_the_parameters_after_those_a_partial_binds_stay_keyword_passable():
    source = """
    import functools
    def f(a, b):
        return a - b
    def h(a, b, c):
        return a * 100 + b * 10 + c
    class Box:
        def scaled(self, by, extra):
            return by * extra
        @staticmethod
        def summed(a, b, c):
            return a + b + c
        def bound(self):
            return functools.partial(self.scaled, 2), functools.partial(self.summed, 1)
    g = functools.partial(f, 10)
    scaled, summed = Box().bound()
    starred = functools.partial(h, *(1,), 2)
    result = (functools.partial(f, 10)(b=3), g(b=3), scaled(extra=5), summed(2, c=3), starred(c=3))
    """
    sig = signatures(source)  # (whoever calls a partial may name what it leaves)
    assert sig["f"] == (["a"], ["b"]) and sig["Box.scaled"] == (["self", "by"], ["extra"])
    shown = textwrap.dedent(source)
    assert run(positional_parameters(shown)) == run(shown) == (7, 7, 10, 6, 123)


def test_a_method_a_computed_getattr_reaches_keeps_the_parameters_any_call_names():
    source = """
    class Commands:
        def do_train(self, steps, warmup):
            return steps * 2 + warmup
        def dispatch(self, name):
            return getattr(self, "do_" + name)(steps=4, warmup=1)
    result = Commands().dispatch("train")
    """
    assert signatures(source)["Commands.do_train"] == (["self"], ["steps", "warmup"])
    shown = textwrap.dedent(source)
    assert run(positional_parameters(shown)) == run(shown) == 9
    by_namespace = """
    def do_train(steps, warmup):
        return steps + warmup
    def dispatch(name):
        return globals()["do_" + name](steps=1, warmup=2)
    result = dispatch("train")
    """
    shown = textwrap.dedent(by_namespace)
    assert run(positional_parameters(shown)) == run(shown) == 3


@pytest.mark.parametrize(
    "source",
    [
        """
        import json
        class Encoder(json.JSONEncoder):  # json.dumps calls iterencode(o, _one_shot=True)
            def iterencode(self, o, _one_shot=False):
                return super().iterencode(o)
        result = json.dumps({"a": 1}, cls=Encoder)
        """,
        """
        import torch
        class Net(torch.nn.Module):  # parameters() calls named_parameters(recurse=...)
            def __init__(self):
                super().__init__()
                self.w = torch.nn.Parameter(torch.zeros(1))
            def named_parameters(self, prefix="", recurse=True, remove_duplicate=True):
                yield from super().named_parameters(prefix, recurse, remove_duplicate)
        result = len(list(Net().parameters()))
        """,
    ],
    ids=["json_iterencode", "torch_named_parameters"],
)
def test_a_method_a_library_base_calls_with_keywords_no_source_names_still_takes_them(source):
    shown = textwrap.dedent(source)
    assert run(positional_parameters(shown)) == run(shown)


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


@pytest.mark.parametrize(
    "body",
    [
        """
        @property
        def span(self):
            return self._span
        @span.setter
        def span(self, value):
            self._span = value
        def grow(self):
            self.span = 3
            return self.span
        """,
        """
        SCALE = 2
        DOUBLE = SCALE * 2
        def grow(self):
            return self.SCALE + self.DOUBLE
        """,
        """
        def get_width(self):
            return 8
        width = property(get_width)
        def grow(self):
            return self.get_width() + self.width
        """,
        """
        STEP = 1
        STEP += 1
        def grow(self):
            return self.STEP
        """,
    ],
    ids=["setter", "constant", "property", "augmented"],
)
def test_a_member_its_class_body_reads_by_its_bare_name_still_works_after_the_renaming(body):
    source = "class Box:\n" + textwrap.indent(textwrap.dedent(body), "    ")
    source += "result = Box().grow()\n"
    assert run(short_attributes(source)) == run(source)


@pytest.mark.parametrize(
    "source",
    [
        """
        class Box:
            def __init__(self):
                self.width = 8
            def show(self):
                return "{0.width}".format(self)
        result = Box().show()
        """,
        """
        import operator
        class Inner:
            def __init__(self):
                self.value = 5
        class Outer:
            def __init__(self):
                self.inner = Inner()
            def get(self):
                return operator.attrgetter("inner.value")(self)
        result = Outer().get()
        """,
        """
        class Box:
            def __init__(self):
                self.kind = "a"
            def check(self):
                match self:
                    case Box(kind="a"):
                        return "yes"
                return "no"
        result = Box().check()
        """,
        """
        class Proxy:
            def __init__(self, data):
                self.data = data
            def __getattr__(self, name):
                return self.data[name]
            def area(self):
                return self.width * 2
        result = Proxy(dict(width=3)).area()
        """,
        """
        class Field:
            def __set_name__(self, owner, name):
                self.label = name
            def __get__(self, obj, kind=None):
                return self.label
        class Box:
            count = Field()
            def show(self):
                return self.count
        result = Box().show()
        """,
        """
        import json
        class Stats:
            def __init__(self):
                self.tokens = 5
            def bump(self):
                self.tokens += 1
                return self
        result = json.dumps(Stats().bump(), default=vars)
        """,
        """
        class Box:
            def __init__(self):
                self.width = 3
            def show(self):
                return eval("self.width + 1")
        result = Box().show()
        """,
    ],
    ids=["format", "attrgetter", "match", "getattr_hook", "set_name", "vars_value", "eval"],
)
def test_attributes_reached_by_their_names_as_text_still_read_after_the_renaming(source):
    shown = textwrap.dedent(source)
    assert run(short_attributes(shown)) == run(shown)


@pytest.mark.parametrize(
    "source",
    [
        """
        import contextlib
        class Resource:
            def __init__(self):
                self.events = []
            def close(self):
                self.events.append("closed")
            def reset(self):
                self.close()
        with contextlib.closing(Resource()) as r:
            pass
        result = r.events
        """,
        """
        class Tee:
            def __init__(self):
                self.flushes = 0
            def write(self, text):
                self.flush()
            def flush(self):
                self.flushes += 1
        tee = Tee()
        print("hi", file=tee, flush=True)
        result = tee.flushes
        """,
        """
        class Settings:
            def keys(self):
                return ["lr"]
            def __getitem__(self, key):
                return 0.5
            def __iter__(self):
                return iter(self.keys())
        def show(lr):
            return lr
        result = show(**Settings())
        """,
    ],
    ids=["closing", "print_flush", "mapping_keys"],
)
def test_methods_library_code_calls_on_any_object_keep_their_names(source):
    shown = textwrap.dedent(source)
    assert run(short_attributes(shown)) == run(shown)


@pytest.mark.parametrize(
    "source",
    [
        """
        class Box:
            def __init__(self):
                self.width = 3
            def area(self):
                return self.width * 2
        def dump(self, names):  # (a function's parameter named self: any object)
            return [getattr(self, n) for n in names.split()]
        result = (Box().area(), dump(Box(), "width"))
        """,
        """
        from os import path
        class Box:
            def __init__(self):
                self.width = 3
            def twice(self):
                return self.width * 2
        def probe(key):
            path = Box()  # (the name of an imported module, bound to a Box here)
            return path.twice(), getattr(path, key + "th")
        result = probe("wid")
        """,
    ],
    ids=["function_parameter_self", "local_named_like_a_module"],
)
def test_a_computed_getattr_of_an_object_but_a_methods_self_or_a_module_turns_the_renaming_off(
    source,
):
    shown = textwrap.dedent(source)
    assert short_attributes(shown) == shown and run(shown)


def test_a_getattr_of_self_keeps_the_names_of_every_class_related_by_inheritance():
    source = """
    class Reader:
        def __init__(self):
            self.alpha = 1
        def dump(self, name):
            return getattr(self, name)
    class Other:  # (a sibling: a subclass's other base)
        def __init__(self):
            self.beta = 2
    class Both(Reader, Other):
        def __init__(self):
            Reader.__init__(self)
            Other.__init__(self)
    result = Both().dump("be" + "ta")
    """
    assert {"alpha", "beta"} <= attributes(source)
    assert run(short_attributes(textwrap.dedent(source))) == 2


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
    assert signatures_anywhere(source)["forward"] == (["self"], ["x", "hint"])


def test_a_library_base_that_cannot_be_imported_stops_the_count_rather_than_change_it():
    source = """
    import not_installed_anywhere as lib
    class Net(lib.Module):
        def helper(self, x):
            return x
    Net().helper(1)
    """
    with pytest.raises(MissingPackage, match="not_installed_anywhere"):
        positional_parameters(textwrap.dedent(source))
