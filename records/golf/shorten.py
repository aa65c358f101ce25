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
one a call names ends it, and so does the first one a partial leaves (whoever calls the partial
may name it; a partial of a method of a method's own `self`, bound, binds one more). A function
stays whole when code other than ours could call it or when its calls' keywords are unknown: it
is read as a value (a callback, a thread's target, a class kept in a table), named in a string
(getattr), called with a `**mapping`, a dunder other than `__init__`, or decorated by anything
but the wrappers below, which pass their arguments through. A method of a class with a library
base that the base defines too (read by importing what the module imports: `dir` of the base;
every method where a base cannot be read so, or the class is defined in a function) may be
called by the library with any keyword (json's `iterencode(o, _one_shot=True)`, nn.Module's
`named_parameters(recurse=...)`): only its first parameter (self, cls: bound by the access)
becomes positional-only (a base whose module is not installed stops the count, MissingPackage:
without it the count would differ). Of those the library calls with its caller's arguments
(LIBRARY_PASS_THROUGH: `forward`, which `model(...)` reaches), a parameter stays whole when any
call anywhere names it; a method the base does not define is only ever called by us. A
function a name computed at run time may reach keeps every parameter a call, string or field
anywhere names:
a method of a family (below) whose `self` a getattr reads so, or any function where one reads
another object (not an imported module) so, or where a scope's names are read (below).

**Attributes only ever used as `self.x` in plain classes get short names.** A plain class has no
base but the module's classes (and bases whose code uses no attribute of a subclass but dunders:
SILENT_BASES), no decorator, and every class of its family (those related to it by inheritance:
ancestors, descendants, their other bases) is plain too, none read by a computed name
(getattr, setattr, ..., vars, dir of a method's `self`: a method of one reads what another's
set). `self` is a method's first parameter of that name, not of a static or class method, bound
nowhere else in it (a class defined inside has its own). An attribute qualifies when every use
of its name as an attribute anywhere is `self.<name>` in a plain class's methods; no string
gives it as text (a whole string; any word of a str.format template, `"{0.width}"`, or of eval's
code; a part of a dotted name, attrgetter's `"inner.value"`), no class pattern (`case P(x=1)`),
and library code may not call it on any object it is handed (PROTOCOL: close, flush, keys, ...);
no field or binding in another class's body names it, and a plain class's own body binds it
only by a def or `name = value` at its top level and reads no member by bare name outside its
methods (`@width.setter`, `DOUBLE = SCALE * 2`, `X += 1`: those keep their names). Methods and
class constants called or read that way are renamed with it. The new names are the shortest the
source uses nowhere. The step is off when an attribute's name is data: a getattr (..., vars,
dir) by a computed name of an object other than a method's `self` or an imported module (a name
nothing but imports binds); a scope's names (globals(), locals(), vars(), dir()); one of those
functions passed as a value (`default=vars`); attrgetter or methodcaller of a computed name; a
hook handed a name (NAME_HOOKS: `__getattr__`, `__set_name__`, ...); and what keeps an
instance's attributes by their names (PERSISTED): `__dict__`, pickling (its modules,
`__getstate__`/`__reduce__` and the like, `torch.load(..., weights_only=False)`): a file written
by the readable form would not load into the renamed one, nor the other way.
"""

from __future__ import annotations

import ast
import contextlib
import itertools
import keyword
import re
import string

from .errors import MissingPackage
from .fold import PASS_THROUGH

PARTIAL = frozenset({"functools.partial", "partial"})
# Members a library base calls only with its caller's own arguments (nn.Module.__call__ hands
# `forward` what `model(...)` got; a class call, `__init__` what `Cls(...)` got): their
# parameters are named by our calls, not the library's
LIBRARY_PASS_THROUGH = frozenset({"forward", "__init__"})
# calls that may make an instance of any class: super().__init__, cls(...) in a classmethod,
# self.__class__(...), type(x)(...)
INSTANTIATIONS = (("attr", "__init__"), ("name", "cls"), ("attr", "__class__"), ("call", ""))
# library bases whose code calls no method and reads no attribute of a subclass but dunders
SILENT_BASES = frozenset({"contextlib.AbstractContextManager"})
# attribute access by a computed name, and the names of a scope
DYNAMIC_ACCESS = frozenset({"getattr", "setattr", "hasattr", "delattr", "vars", "dir"})
NAMESPACES = frozenset({"globals", "locals"})
# what library code calls or reads on an object it is handed, whatever its class (duck typing)
PROTOCOL = frozenset(
    {"close", "flush", "write", "writelines", "read", "readline", "readlines", "fileno",
     "seek", "tell", "name", "keys", "items", "values", "get", "filter", "emit",
     "handle", "format", "run", "start", "join", "send", "throw", "step", "forward",
     "state_dict", "load_state_dict", "train", "eval", "parameters", "named_parameters",
     "buffers", "modules", "children", "zero_grad", "update", "copy", "fit", "predict"}
)  # fmt: skip
# what keeps attributes by their names as data: an instance's dict, and pickling
PERSISTED_ATTRIBUTES = frozenset(
    {"__dict__", "__getstate__", "__setstate__", "__reduce__", "__reduce_ex__", "__getnewargs__"}
)
PICKLING_MODULES = frozenset({"pickle", "copyreg", "shelve", "dill", "cloudpickle", "joblib"})
# hooks handed an attribute's name as data: a lookup's (a proxy's `__getattr__`), a descriptor's
NAME_HOOKS = frozenset(
    {"__getattr__", "__getattribute__", "__setattr__", "__delattr__", "__set_name__", "__dir__"}
)


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
    library_based, reach, selves = _library_based(tree), _computed_reach(tree), _selves(tree)
    module_classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    members = _library_members(tree, library_based)
    for owner, fn in _functions(tree):
        if not _only_we_call(fn, values | strings):
            continue
        if fn.name == "__init__" and owner is not None:
            sites = [call for key in (("name", owner.name), *INSTANTIATIONS)
                     for call in calls.get(key, [])]  # fmt: skip
        else:
            sites = calls.get(("attr" if owner else "name", fn.name), [])
        partials = _bound_by_partials(fn, sites, selves)
        # (a class defined in a function, with a base: any base may call it)
        nested = owner is not None and owner not in module_classes and owner.bases
        library = owner is not None and owner.name in library_based
        theirs = library and fn.name in members.get(owner.name, {fn.name})
        if nested or theirs:
            bound = _bound_on_access(fn)  # (the library's calls may name all but self)
            _make_positional(fn.args, set(), bound if partials is None else min(bound, partials))
        elif library and fn.name in LIBRARY_PASS_THROUGH - {"__init__"}:  # (`model(...)`)
            _make_positional(fn.args, anywhere | strings | fields, partials)
        elif fn.name == "__init__" and (owner is None or owner.name in values):
            continue  # (a class read as a value: whoever calls it may name anything)
        elif reach is None or (owner is not None and owner.name in reach):
            # (reached by a computed name: `getattr(self, "do_" + name)(steps=4)`)
            _make_positional(fn.args, anywhere | strings | fields, partials)  # (fields: **asdict)
        elif None not in (keywords := [k.arg for call in sites for k in call.keywords]):
            _make_positional(fn.args, set(keywords), partials)  # (None: a **mapping's unknown)
    return ast.unparse(tree)


def _library_members(tree: ast.Module, library_based: set[str]) -> dict[str, frozenset]:
    """For each module class with a library base, the names its library ancestors define that
    their code may call with keywords of its own (all of them but LIBRARY_PASS_THROUGH), found
    by importing what the module imports and reading the bases; a class whose bases cannot be
    read so is absent (every method then counts as the library's)."""
    namespace: dict = {}
    missing = []
    for stmt in _top_level_imports(tree):
        try:
            exec(compile(ast.Module([stmt], []), "<imports>", "exec"), namespace)
        except ImportError as exc:  # (then the count would differ from where they are)
            missing.append(exc.name or str(exc))
        except Exception:  # (an import that fails otherwise leaves its names unknown)
            pass
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    out: dict[str, frozenset] = {}

    def members(name: str) -> frozenset | None:
        if name not in out:
            out[name] = None  # (a cycle reads as unknown)
            found = set()
            for base in classes[name].bases:
                if isinstance(base, ast.Name) and base.id in classes:
                    inherited = members(base.id)
                else:
                    value = None
                    with contextlib.suppress(Exception):
                        value = eval(compile(ast.Expression(base), "<base>", "eval"), namespace)
                    inherited = set(dir(value)) if isinstance(value, type) else None
                if inherited is None:
                    return None
                found |= inherited
            out[name] = frozenset(found - LIBRARY_PASS_THROUGH)
        return out[name]

    known = {name: members(name) for name in library_based if name in classes}
    if missing and None in known.values():
        raise MissingPackage(
            f"counting this script's code reads its classes' library bases, which need "
            f"{', '.join(sorted(set(missing)))} (pip install -r requirements.txt)"
        )
    return {name: m for name, m in known.items() if m is not None}


def _top_level_imports(tree: ast.Module) -> list:
    """The module's imports outside functions and classes (in a `try:` too)."""
    out, todo = [], list(tree.body)
    while todo:
        stmt = todo.pop()
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            out.append(stmt)
        elif isinstance(stmt, (ast.Try, ast.If)):
            todo += [*stmt.body, *stmt.orelse, *getattr(stmt, "finalbody", [])]
            todo += [s for h in getattr(stmt, "handlers", []) for s in h.body]
    return out


def _bound_on_access(fn: ast.FunctionDef) -> int:
    """1 for a method that binds its first parameter (self, cls) when reached as an attribute:
    no call names it; else (a staticmethod) 0."""
    return int("staticmethod" not in _decorators(fn))


def _decorators(fn: ast.FunctionDef) -> set[str]:
    return {ast.unparse(d) for d in fn.decorator_list}


def _bound_by_partials(fn: ast.FunctionDef, sites: list[ast.Call], selves: dict) -> int | None:
    """How many leading parameters every functools.partial of `fn` among `sites` binds (None
    for no partial): whoever calls a partial may name any parameter after those."""
    bound = None
    for call in filter(_is_partial, sites):
        args = list(itertools.takewhile(lambda a: not isinstance(a, ast.Starred), call.args))
        # (a method reached on an instance, a method's `self`, is bound: one more)
        on_self = isinstance(call.args[0], ast.Attribute) and id(call.args[0].value) in selves
        count = len(args) - 1 + (on_self and _bound_on_access(fn))
        bound = count if bound is None else min(bound, count)
    return bound


def _is_partial(call: ast.Call) -> bool:
    func = call.func
    named = isinstance(func, (ast.Name, ast.Attribute)) and ast.unparse(func) in PARTIAL
    return named and bool(call.args)


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
    return call.args[0] if _is_partial(call) else call.func


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


def _make_positional(args: ast.arguments, named: set[str], most: int | None = None) -> None:
    """The leading parameters no caller names (at most `most`) become positional-only (the
    defaults stay aligned: they count from the end of the positional parameters, which keep
    their order)."""
    params = args.posonlyargs + args.args
    k = len(args.posonlyargs)
    end = len(params) if most is None else max(k, min(most, len(params)))
    while k < end and params[k].arg not in named:
        k += 1
    args.posonlyargs, args.args = params[:k], params[k:]


def short_attributes(source: str) -> str:
    """`source` with the attributes only plain classes use on `self` renamed (module docstring)."""
    tree = ast.parse(source)
    reach = _computed_reach(tree)
    if reach is None or _persists_attributes(tree):
        return source
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    plain = _plain_classes(tree, classes, reach)
    selves = _selves(tree)
    attributes = [n for n in ast.walk(tree) if isinstance(n, ast.Attribute)]
    own = [n for n in attributes if _on_self(n, selves) in plain]
    owned = {id(n) for n in own}
    refused = _words(tree) | PROTOCOL | _match_attributes(tree)
    refused |= {n.attr for n in attributes if id(n) not in owned}
    for cls in classes:
        refused |= _class_scope_names(cls) if cls in plain else set()
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


def _on_self(node: ast.Attribute, selves: dict) -> ast.ClassDef | None:
    """The class of the method whose own `self` an attribute is read on (`_selves`), or None."""
    return selves.get(id(node.value))


def _selves(tree: ast.Module) -> dict[int, ast.ClassDef]:
    """{id of a `self` node: its class}: the reads of a method's first parameter, named
    `self`, where nothing else in the method binds that name (a nested def's own `self`)."""
    out = {}
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        for fn in (s for s in cls.body if isinstance(s, ast.FunctionDef)):
            params = fn.args.posonlyargs + fn.args.args
            instance = not _decorators(fn) & {"staticmethod", "classmethod"}
            if not (instance and params and params[0].arg == "self"):
                continue
            nodes = list(_in_class(fn))
            others = [n for n in nodes if isinstance(n, ast.arg) and n.arg == "self"]
            stores = [n for n in nodes if _is_self(n) and not isinstance(n.ctx, ast.Load)]
            if others == [params[0]] and not stores:
                out |= {id(n): cls for n in nodes if _is_self(n)}
    return out


def _in_class(node):
    """The nodes under `node`, not those of a class defined inside it (its own `self`)."""
    todo = list(ast.iter_child_nodes(node))
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


def _class_scope_names(cls: ast.ClassDef) -> set[str]:
    """The names a class body reads or binds but by a def or a plain `name = value` at its top
    level (the two bindings the renaming renames): a decorator (`@width.setter`), a default, a
    constant's value (`DOUBLE = SCALE * 2`), `X += 1`, a def under an `if` read its members by
    bare name."""
    todo: list[ast.AST] = []
    for stmt in cls.body:
        if isinstance(stmt, ast.FunctionDef):
            params = [*stmt.args.posonlyargs, *stmt.args.args, *stmt.args.kwonlyargs]
            params += [stmt.args.vararg, stmt.args.kwarg]
            todo += [*stmt.decorator_list, *stmt.args.defaults, *stmt.args.kw_defaults]
            todo += [stmt.returns, *(p.annotation for p in params if p is not None)]
        elif isinstance(stmt, ast.Assign) and all(isinstance(t, ast.Name) for t in stmt.targets):
            todo.append(stmt.value)
        else:
            todo.append(stmt)
    return {
        part for node in todo if node is not None for n in ast.walk(node)
        for field in ("id", "name", "asname", "rest", "arg", "names")
        for value in _as_list(getattr(n, field, None)) if isinstance(value, str)
        for part in (value, value.split(".")[0])
    }  # fmt: skip


def _as_list(value) -> list:
    return value if isinstance(value, list) else [value]


def _words(tree: ast.Module) -> set[str]:
    """The names a string may give an attribute as text: every identifier in a str.format
    template (`"{0.width}"`) or in code (eval, exec, compile), each part of a dotted name
    (attrgetter's `"inner.value"`); not a docstring's."""
    code = {id(n) for c in ast.walk(tree) if isinstance(c, ast.Call)
            and getattr(c.func, "id", "") in ("eval", "exec", "compile")
            for n in ast.walk(c)}  # fmt: skip
    docstrings = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr)}
    out = set()
    for n in ast.walk(tree):
        if not (isinstance(n, ast.Constant) and isinstance(n.value, str)):
            continue
        if id(n) in docstrings:  # (a string statement: no code reads it)
            continue
        if "{" in n.value or id(n) in code:
            out |= set(re.findall(r"[^\W\d]\w*", n.value))
        elif not any(c.isspace() for c in n.value):
            out |= set(n.value.split("."))
    return out


def _match_attributes(tree: ast.Module) -> set[str]:
    """The attributes a class pattern names (`case Box(width=2)`)."""
    return {a for n in ast.walk(tree) if isinstance(n, ast.MatchClass) for a in n.kwd_attrs}


def _computed_reach(tree: ast.Module) -> set[str] | None:
    """The names of the classes whose members a name computed at run time may reach: the family
    of a class whose method reads its own `self` so (getattr, setattr, ..., vars, dir); None for
    any: another object read so (but an imported module), a namespace read (globals(), vars()),
    one of these functions passed as a value (`default=vars`), attrgetter or methodcaller of a
    computed name."""
    if _reads_a_namespace(tree):
        return None
    selves, modules = _selves(tree), _modules(tree)
    families = _families([n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)])
    reach: set[str] = set()
    for n in ast.walk(tree):
        if (obj := _computed_access(n)) is None:
            continue
        if id(obj) in selves:
            reach |= families[selves[id(obj)].name]
            continue
        root = obj
        while isinstance(root, ast.Attribute):
            root = root.value
        if not (isinstance(root, ast.Name) and root.id in modules):
            return None
    return reach


def _reads_a_namespace(tree: ast.Module) -> bool:
    """globals(), locals(), vars() or dir() of a scope; getattr (..., vars, dir) passed as a
    value (`default=vars`); attrgetter or methodcaller of a computed name."""
    called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    for n in ast.walk(tree):
        if isinstance(n, ast.Name) and (
            n.id in NAMESPACES or (n.id in DYNAMIC_ACCESS and id(n) not in called)
        ):
            return True
        if not isinstance(n, ast.Call):
            continue
        func = n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", "")
        if func in ("vars", "dir") and not n.args:
            return True
        computed = any(not isinstance(a, ast.Constant) for a in n.args)
        if func in ("attrgetter", "methodcaller") and computed:
            return True
    return False


def _modules(tree: ast.Module) -> set[str]:
    """The names only imports bind, nothing else anywhere (a local `path = P()` is no module),
    and not of this script itself (`import __main__`)."""
    imported, bound = set(), set()
    for n in ast.walk(tree):
        if isinstance(n, (ast.Import, ast.ImportFrom)) and getattr(n, "module", "") != "__main__":
            imported |= {(a.asname or a.name).split(".")[0] for a in n.names}
        elif isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load):
            bound.add(n.id)
        elif not isinstance(n, ast.alias):  # (a parameter, a def, a class, except's, match's)
            bound |= {v for f in ("arg", "name", "rest") if isinstance(v := getattr(n, f, 0), str)}
    return imported - bound - {"__main__"}


def _persists_attributes(tree: ast.Module) -> bool:
    """Reads or writes attributes by their names as data (module docstring: PERSISTED)."""
    by_name = PERSISTED_ATTRIBUTES | NAME_HOOKS
    for n in ast.walk(tree):
        if isinstance(n, ast.Attribute) and n.attr in by_name:
            return True
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name in by_name:
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
    by_constant = len(node.args) > 1 and isinstance(node.args[1], ast.Constant)
    named = node.func.id not in ("vars", "dir") and by_constant
    return None if named else node.args[0]  # (a constant name is a string: refused by it)


def _is_self(node) -> bool:
    return isinstance(node, ast.Name) and node.id == "self"


def _plain_classes(
    tree: ast.Module, classes: list[ast.ClassDef], reach: set[str]
) -> list[ast.ClassDef]:
    """Classes whose instances only our code reads (module docstring): no library base, no
    decorator, none of `reach` (read by a computed name), and all their family plain too (a
    method of one reads what another's set)."""
    library = _library_based(tree)
    candidates = {
        c.name for c in classes if c.name not in library and not c.decorator_list
        and c.name not in reach
    }  # fmt: skip
    families = _families(classes)
    return [c for c in classes if families[c.name] <= candidates]


def _families(classes: list[ast.ClassDef]) -> dict[str, set[str]]:
    """{class name: the classes related to it by inheritance among `classes`, itself too}:
    ancestors, descendants, and theirs (a subclass's other bases)."""
    names = {c.name for c in classes}
    links = {c.name: set() for c in classes}
    for c in classes:
        for base in (b.id for b in c.bases if isinstance(b, ast.Name) and b.id in names):
            links[c.name].add(base)
            links[base].add(c.name)
    out: dict[str, set[str]] = {}
    for name in links:
        if name not in out:
            family, todo = set(), [name]
            while todo:
                if (n := todo.pop()) not in family:
                    family.add(n)
                    todo += links[n]
            out |= dict.fromkeys(family, family)
    return out


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
