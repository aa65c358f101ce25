"""A specialised script's names shortened beyond what python-minifier can prove safe.

python-minifier renames locals and module-level names, but keeps a parameter's name (a caller
could pass it by keyword) and every attribute's. A specialised script (records/golf/specialize.py)
is never imported and nothing reads its objects but itself, so two more steps are safe there;
the counted form (`shortened`, used by specialize.py's `counted`) applies both, the `-o` output,
for reading, neither. #1855's settings: about 1,000 counted bytes together.

**Parameters no call names become positional-only**, and the minifier then renames them like any
local. The calls of a function are those of its name (or functools.partial of it); of a method,
those of any attribute of its name (whatever the object); of `__init__`, those of its class's
name and of any `.__init__`. Only a leading run of parameters can be positional-only: the first
one a call names ends it. A function stays whole when code other than ours could call it or when
its calls' keywords are unknown: it is read as a value (a callback, a thread's target, a class
kept in a table), named in a string (getattr), called with a `**mapping`, a dunder other than
`__init__`, or decorated by anything but the wrappers below, which pass their arguments through.
A method of a class with a library base (nn.Module: `model(...)` reaches `forward`) may be called
by the library: its parameters stay keyword-passable if any call or string anywhere names them.

**Attributes only ever used as `self.x` in plain classes get short names.** A plain class has no
base but the module's classes (and bases whose code uses no attribute of a subclass but dunders:
SILENT_BASES), no decorator, no `getattr`-like access to `self` by a computed name, and every
ancestor and descendant among the module's classes is plain too (a method of one reads what
another's set). An attribute qualifies when every use of its name as an attribute anywhere is
`self.<name>` in a plain class's methods (a class defined inside one has its own `self`), and no
string, field, or binding in another class's body names it; methods and class constants called
or read that way are renamed with it. The new names are the shortest the source uses nowhere.
Any getattr (setattr, ..., vars) by a computed name of an object other than `self` or a module
turns the step off: it could read any instance's attribute. So does anything that reads or
writes an instance's attributes by their names as data (PERSISTED): `__dict__`, pickling (its
modules, `__getstate__`/`__reduce__` and the like, `torch.load(..., weights_only=False)`): a
file written by the readable form would not load into the renamed one, nor the other way.
"""

from __future__ import annotations

import ast
import itertools
import keyword
import string

PASS_THROUGH = frozenset(
    {"staticmethod", "classmethod", "property", "contextlib.contextmanager", "torch.no_grad"}
)
PARTIAL = frozenset({"functools.partial", "partial"})
# calls that may make an instance of any class: super().__init__, cls(...) in a classmethod,
# self.__class__(...), type(x)(...)
INSTANTIATIONS = (("attr", "__init__"), ("name", "cls"), ("attr", "__class__"), ("call", ""))
# library bases whose code calls no method and reads no attribute of a subclass but dunders
SILENT_BASES = frozenset({"contextlib.AbstractContextManager"})
# attribute access by a computed name
DYNAMIC_ACCESS = frozenset({"getattr", "setattr", "hasattr", "delattr", "vars"})
# what keeps attributes by their names as data: an instance's dict, and pickling
PERSISTED_ATTRIBUTES = frozenset(
    {"__dict__", "__getstate__", "__setstate__", "__reduce__", "__reduce_ex__", "__getnewargs__"}
)
PICKLING_MODULES = frozenset({"pickle", "copyreg", "shelve", "dill", "cloudpickle", "joblib"})


def shortened(source: str) -> str:
    """`source` with both steps of the module docstring: what the counted form packs."""
    return short_attributes(positional_parameters(source))


def positional_parameters(source: str) -> str:
    """`source` with the parameters no caller names positional-only (module docstring)."""
    tree = ast.parse(source)
    strings = _strings(tree)
    anywhere = {k.arg for n in ast.walk(tree) if isinstance(n, ast.Call) for k in n.keywords}
    values, calls = _passed_as_values(tree), _calls(tree)
    fields = {n.target.id for n in ast.walk(tree) if isinstance(n, ast.AnnAssign)
              and isinstance(n.target, ast.Name)}  # fmt: skip
    library_based = _library_based(tree)
    module_classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    for owner, fn in _functions(tree):
        if not _only_we_call(fn, values | strings):
            continue
        # (a class defined in a function, with a base: any base may call it)
        nested = owner is not None and owner not in module_classes and owner.bases
        if nested or (owner is not None and owner.name in library_based):
            _make_positional(fn.args, anywhere | strings | fields)  # (fields: **asdict)
            continue
        if fn.name == "__init__":
            if owner is None or owner.name in values:
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
        func = _callee(n)
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
            called |= {id(n.func), id(_callee(n))}
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


def _callee(call: ast.Call) -> ast.expr:
    """What a call calls: functools.partial's wrapped function for a partial."""
    partial = isinstance(call.func, (ast.Name, ast.Attribute)) and ast.unparse(call.func) in PARTIAL
    return call.args[0] if partial and call.args else call.func


def _library_based(tree: ast.Module) -> set[str]:
    """The module's classes with a base that is not one of its classes (nor a silent one), or
    derived from one."""
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    direct = {
        name for name, cls in classes.items()
        if any(not (isinstance(b, ast.Name) and b.id in classes)
               and ast.unparse(b) not in SILENT_BASES for b in cls.bases)
    }  # fmt: skip
    return {name for name, cls in classes.items()
            if name in direct or _ancestors(cls, classes) & direct}  # fmt: skip


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


def short_attributes(source: str) -> str:
    """`source` with the attributes only plain classes use on `self` renamed (module docstring)."""
    tree = ast.parse(source)
    if _reads_attributes_by_computed_names(tree) or _persists_attributes(tree):
        return source
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    plain = _plain_classes(tree, classes)
    own = [n for c in plain for n in _in_class(c) if _on_self(n)]
    owned = {id(n) for n in own}
    refused = _strings(tree) | {
        n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and id(n) not in owned
    }
    for cls in classes:
        for stmt in cls.body:
            if cls not in plain or isinstance(stmt, ast.AnnAssign):
                refused |= set(_class_bindings(stmt))
    counts: dict[str, int] = {}
    for n in own:
        if n.attr not in refused and not n.attr.startswith("__"):
            counts[n.attr] = counts.get(n.attr, 0) + 1
    ranked = sorted(counts, key=lambda name: (-counts[name], name))  # the shortest: most used
    mapping = dict(zip(ranked, _fresh_names(tree), strict=False))  # (an endless supply)
    for node in own:
        node.attr = mapping.get(node.attr, node.attr)
    for stmt in (stmt for cls in plain for stmt in cls.body):
        if isinstance(stmt, ast.FunctionDef):
            stmt.name = mapping.get(stmt.name, stmt.name)
        elif isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                if isinstance(target, ast.Name):
                    target.id = mapping.get(target.id, target.id)
    return ast.unparse(tree)


def _on_self(node) -> bool:
    return isinstance(node, ast.Attribute) and _is_self(node.value)


def _in_class(cls: ast.ClassDef):
    """The nodes of a class, not those of a class defined inside it (its own `self`)."""
    todo = list(ast.iter_child_nodes(cls))
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, ast.ClassDef):
            todo.extend(ast.iter_child_nodes(node))


def _class_bindings(stmt) -> list[str]:
    """The names a statement of a class body binds (a method, a constant, a field)."""
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [stmt.name]
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [getattr(stmt, "target", None)]
    return [t.id for t in targets if isinstance(t, ast.Name)]


def _reads_attributes_by_computed_names(tree: ast.Module) -> bool:
    """getattr (setattr, ..., vars) by a computed name of anything but `self` or a module."""
    modules = {
        (alias.asname or alias.name).split(".")[0]
        for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
        for alias in n.names
    }  # fmt: skip
    for n in ast.walk(tree):
        if (obj := _computed_access(n)) is None or _is_self(obj):
            continue
        root = obj
        while isinstance(root, ast.Attribute):
            root = root.value
        if not (isinstance(root, ast.Name) and root.id in modules):
            return True
    return False


def _persists_attributes(tree: ast.Module) -> bool:
    """Reads or writes attributes by their names as data (module docstring: PERSISTED)."""
    for n in ast.walk(tree):
        if isinstance(n, ast.Attribute) and n.attr in PERSISTED_ATTRIBUTES:
            return True
        if (
            isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            and n.name in PERSISTED_ATTRIBUTES
        ):
            return True
        if isinstance(n, ast.Import) and any(
            a.name.split(".")[0] in PICKLING_MODULES for a in n.names
        ):
            return True
        if isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[0] in PICKLING_MODULES:
            return True
        unsafe_load = isinstance(n, ast.keyword) and n.arg == "weights_only"
        if unsafe_load and not (isinstance(n.value, ast.Constant) and n.value.value is True):
            return True
    return False


def _computed_access(node) -> ast.expr | None:
    """The object a getattr (setattr, ..., vars) call reaches by a computed name; else None."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args):
        return None
    if node.func.id not in DYNAMIC_ACCESS:
        return None
    named = node.func.id != "vars" and len(node.args) > 1 and isinstance(node.args[1], ast.Constant)
    return None if named else node.args[0]  # (a constant name is a string: refused by it)


def _is_self(node) -> bool:
    return isinstance(node, ast.Name) and node.id == "self"


def _plain_classes(tree: ast.Module, classes: list[ast.ClassDef]) -> list[ast.ClassDef]:
    """Classes whose instances only our code reads (module docstring): no library base, no
    decorator, no access to `self` by a computed name, and every ancestor and descendant of
    the module's plain too (a method of one reads what another's set)."""
    library = _library_based(tree)
    by_name = {c.name: c for c in classes}
    ancestors = {c.name: _ancestors(c, by_name) for c in classes}
    candidates = {
        c.name for c in classes
        if c.name not in library and not c.decorator_list
        and not any(_is_self(_computed_access(n)) for n in ast.walk(c))
    }  # fmt: skip
    tainted = {a for c in by_name if c not in candidates for a in ancestors[c]}
    tainted |= {c for c in candidates if ancestors[c] - candidates}
    return [c for c in classes if c.name in candidates - tainted]


def _ancestors(cls: ast.ClassDef, by_name: dict) -> set[str]:
    out, todo = set(), [b.id for b in cls.bases if isinstance(b, ast.Name)]
    while todo:
        name = todo.pop()
        if name in by_name and name not in out:
            out.add(name)
            todo += [b.id for b in by_name[name].bases if isinstance(b, ast.Name)]
    return out


def _fresh_names(tree: ast.Module):
    """The shortest identifiers the source uses nowhere (no name, attribute, argument, keyword,
    word of a string), shortest first."""
    used = set(keyword.kwlist)
    for n in ast.walk(tree):
        for field in ("id", "attr", "arg", "name", "asname"):
            value = getattr(n, field, None)
            if isinstance(value, str):
                used.add(value)
    used |= {word for text in _strings(tree) for word in text.replace(".", " ").split()}
    first = string.ascii_letters
    for length in itertools.count(1):
        for letters in itertools.product(first, repeat=length):
            name = "".join(letters)
            if name not in used:
                yield name


def _strings(tree: ast.Module) -> set[str]:
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)
            and isinstance(n.value, str)}  # fmt: skip
