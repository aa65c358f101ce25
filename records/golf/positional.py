"""A specialised script's parameters made positional-only where no caller names them.

python-minifier shortens local names but keeps a parameter's, as a caller could pass it by
keyword. A specialised script (records/golf/specialize.py) is never imported: every call of its
functions is in it, so a parameter that no call of its function names can be positional-only,
and the minifier then renames it like any local. #1855's settings: about 600 counted bytes.

The calls of a function are those of its name (or functools.partial of it); of a method, those
of any attribute of its name (whatever the object); of `__init__`, those of its class's name and
of any `.__init__`. Only a leading run of parameters can be positional-only: the first one a
call names ends it. A function stays whole when code other than ours could call it or when its
calls' keywords are unknown: it is read as a value (a callback, a thread's target, a class kept
in a table), named in a string (getattr), called with a `**mapping`, a dunder other than
`__init__`, or decorated by anything but the wrappers below, which pass their arguments through.
A method of a class with a library base (nn.Module: `model(...)` reaches `forward`) may be called
by the library: its parameters stay keyword-passable if any call or string anywhere names them.
The counted form (`counted` in specialize.py) applies this; the `-o` output, for reading, not.
"""

from __future__ import annotations

import ast

PASS_THROUGH = frozenset(
    {"staticmethod", "classmethod", "property", "contextlib.contextmanager", "torch.no_grad"}
)
PARTIAL = frozenset({"functools.partial", "partial"})
# calls that may make an instance of any class: super().__init__, cls(...) in a classmethod,
# self.__class__(...), type(x)(...)
INSTANTIATIONS = (("attr", "__init__"), ("name", "cls"), ("attr", "__class__"), ("call", ""))


def positional_parameters(source: str) -> str:
    """`source` with the parameters no caller names positional-only (module docstring)."""
    tree = ast.parse(source)
    strings = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)
               and isinstance(n.value, str)}  # fmt: skip
    anywhere = {k.arg for n in ast.walk(tree) if isinstance(n, ast.Call) for k in n.keywords}
    values, calls = _passed_as_values(tree), _calls(tree)
    fields = {n.target.id for n in ast.walk(tree) if isinstance(n, ast.AnnAssign)
              and isinstance(n.target, ast.Name)}  # fmt: skip
    library_based = _library_based(tree)
    for owner, fn in _functions(tree):
        if not _only_we_call(fn, values | strings):
            continue
        if owner is not None and owner.name in library_based:  # (fields: `**asdict(...)`)
            _make_positional(fn.args, anywhere | strings | fields)
            continue
        if fn.name == "__init__":
            if owner.name in values:
                continue
            sites = [call for key in (("name", owner.name), *INSTANTIATIONS)
                     for call in calls.get(key, [])]  # fmt: skip
        else:
            sites = calls.get(("attr" if owner else "name", fn.name), [])
        keywords = [k.arg for call in sites for k in call.keywords]
        if None not in keywords:  # (a **mapping: its keys are unknown)
            _make_positional(fn.args, set(keywords))
    return ast.unparse(tree)


def _functions(tree: ast.Module):
    """(the class a function is a method of, or None; the function), for every def."""
    for node in ast.walk(tree):
        body = node.body if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef)) else []
        for stmt in body if isinstance(body, list) else []:
            if isinstance(stmt, ast.FunctionDef):
                yield (node if isinstance(node, ast.ClassDef) else None), stmt


def _calls(tree: ast.Module) -> dict[tuple[str, str], list[ast.Call]]:
    """{("name", f) or ("attr", m): the calls of that name or attribute}, functools.partial's
    of it counted as calls (its keywords are the call's)."""
    out: dict[tuple[str, str], list[ast.Call]] = {}
    for n in ast.walk(tree):
        if not isinstance(n, ast.Call):
            continue
        func = n.args[0] if ast.unparse(n.func) in PARTIAL and n.args else n.func
        if isinstance(func, ast.Name):
            out.setdefault(("name", func.id), []).append(n)
        elif isinstance(func, ast.Call):
            out.setdefault(("call", ""), []).append(n)
        elif isinstance(func, ast.Attribute):
            out.setdefault(("attr", func.attr), []).append(n)
    return out


def _passed_as_values(tree: ast.Module) -> set[str]:
    """Names, and attribute names, read other than as what a call calls (or what partial wraps,
    or a decorator): whoever calls those may name their parameters."""
    called = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Call):
            called.add(id(n.func))
            if ast.unparse(n.func) in PARTIAL and n.args:
                called.add(id(n.args[0]))
        elif isinstance(n, (ast.FunctionDef, ast.ClassDef)):
            called |= {id(d) for d in n.decorator_list}
    values = set()
    for n in ast.walk(tree):
        if id(n) in called or not isinstance(getattr(n, "ctx", None), ast.Load):
            continue
        if isinstance(n, ast.Name):
            values.add(n.id)
        elif isinstance(n, ast.Attribute):
            values.add(n.attr)
    return values


def _library_based(tree: ast.Module) -> set[str]:
    """The module's classes with a base that is not one of its classes, or derived from one."""
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    ours = set(classes)
    out: set[str] = set()
    changed = True
    while changed:
        changed = False
        for name, cls in classes.items():
            bases = [b.id if isinstance(b, ast.Name) else None for b in cls.bases]
            if name not in out and any(b not in ours or b in out for b in bases):
                out.add(name)
                changed = True
    return out


def _only_we_call(fn: ast.FunctionDef, refused: set[str]) -> bool:
    dunder = fn.name.startswith("__") and fn.name.endswith("__")
    if fn.name in refused or (dunder and fn.name != "__init__"):
        return False
    wrappers = (ast.unparse(d.func if isinstance(d, ast.Call) else d) for d in fn.decorator_list)
    return all(w in PASS_THROUGH for w in wrappers)


def _make_positional(args: ast.arguments, named: set[str]) -> None:
    """The leading parameters no caller names become positional-only (the defaults stay aligned:
    they count from the end of the positional parameters, which keep their order)."""
    params = args.posonlyargs + args.args
    k = len(args.posonlyargs)
    while k < len(params) and params[k].arg not in named:
        k += 1
    args.posonlyargs, args.args = params[:k], params[k:]
