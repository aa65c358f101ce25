"""Specialise train_gpt.py to one run's settings: the script a record ships and counts.

The readable train_gpt.py holds the baseline and every preset, and reads every setting from the
environment. A record runs one configuration, so its counted code need not carry the others.
`specialize` writes that script from the readable one, on its syntax tree, generic over the source:

1. Settings. The run's values come from the script itself: `Hyperparameters.from_env(env)` (a
   preset: `{"PRESET": name}`) or a log's `hyperparameters:{json}` dump. Every field is frozen at
   its value except FREE: DATA_PATH and TOKENIZER_PATH (where another machine keeps the data),
   RUN_ID (the log's name) and SEED (a record's runs differ in it), and the pod's settings
   (POD_SETTINGS: checkpoints and resuming, evaluation-only re-scoring) but those whose code
   would put the preset's counted code over its record's own (POD_BUILT_IN: #1855 builds in
   both). Everything else is the record's run and nothing else.
2. Config reads. `cfg.x`, `self.cfg.x`, `model.cfg.x`, ... (any `cfg` name or `.cfg` attribute) and
   `self.x` inside the settings class become constants for frozen fields, and so do the class's
   properties (cached ones too: PROPERTY_DECORATORS) whose value does not depend on the free
   fields (`cfg.window`, `cfg.seq_stages`) and whose getter only computes (`pure_properties`: no
   file, environment or clock is read here for the run). That every
   `cfg` is the run's settings is checked, not assumed (`check_settings_names`: no other instance
   is built, every `cfg` bound or passed is one); where it may not hold the specialiser stops and
   names the line. Module constants computed from files beside the script at import become
   literals, and so do tables of settings built by code of literals alone (`PR2014 = PR1855 |
   dict(...)`, `PRESETS`; not `dict(os.environ)`), so lookups on frozen keys fold. The `--help`
   function (HELP_FUNCTION) says what the specialised script is; the code-bytes function
   (CODE_BYTES_FUNCTION) returns the size of the script's packed form (`readable_specialized` finds
   it: the script runs readable, and counts as packed); a lookup of the table of defaults
   (DEFAULTS_TABLE) is the readable default.
3. The settings class. Frozen fields keep their readable default (so the `hyperparameters:` dump
   and the `settings:` line are the same) without their bounds (they cannot fail); free fields
   become the plain `dataclasses.field` their declaration (SETTING_FUNCTION) returns, with their
   bounds and without their notes (group, help: --help's), so the declaration function goes;
   `from_env` is
   replaced by one that parses the environment as the readable one does (`parse_value` by each
   field's type, `get_type_hints`: names the readable script defines and imports), refuses a frozen
   variable set to another value in one line (`NAME=value: this script is specialised to
   NAME=frozen; the readable train_gpt.py takes others`, an empty text frozen shown as ''),
   keeps the fixed-variable refusals (FIXED_VARIABLES, as a literal of the accepted values:
   `NAME='x': not read here (fixed at '0'); unset it`, without the readable script's reason),
   and builds the frozen configuration.
4. Folding (records/golf/fold.py), to a fixpoint: constant expressions (not/and/or,
   comparisons, `in` on literal tuples, ternaries, arithmetic, f-strings and their format
   specs, a few pure builtins and str methods, `all`/`any`/`sum` of comprehensions over
   constants, subscripts of module-level literal dicts and of a literal dict by a constant
   key), tests by their truth (`x and True` is x; `x and False` is False when x only reads;
   an `elif` on its `if`'s test never runs),
   `if`/`while` on constants, statements after return/raise (or an `if` whose branches all
   end; not after a `with`, whose context manager may swallow an exception), single-assignment
   constant locals whose reads follow them in their block (and the constant parts of what a
   function always returns: `val, windows, plan = load_data(...)`), a local dict of constants
   only looked up (its lookups), locals no code reads, stores overwritten at once, calls of
   functions that only return a constant (or a list of them: a new one each call), validation
   checks of the form `(broken, NAME, want)` whose
   `broken` folded to False.
   Functions that read files beside the script (presets/) are evaluated on constant arguments,
   as the record folder has no such files. Then, across functions:
   - a parameter every call passes the same constant (or leaves at that default) becomes it, and
     one the body never reads goes (functions and classes only ever called by their one name,
     undecorated or by a decorator that passes the arguments through, no instance built
     without naming its class: `cls()`, `type(x)()`);
   - `self.x = <constant>` in `__init__`, stored nowhere else (no `setattr`, `vars`,
     `__dict__`), before any statement that may return or run a method of ours, in a class
     no subclass builds without its `__init__`, is that constant in the class's methods;
     `hasattr(self, "x")` folds when `__init__` always stores x so, or nothing (no store, class
     attribute or method) gives an instance an x;
   - a hook that does nothing (`pass`, or `return contextlib.nullcontext()`: Trainer.phase) is
     no longer called or entered.
   benchmarks/RESULTS.md's table of passes gives each one's lines and the bytes it saves.
5. Reachability, to a fixpoint: from the module's statements that are not definitions (the
   `if __name__ == "__main__"` block), every function, class, constant and import referenced by
   name; a method, or a plain class attribute (a property), is kept when its name is used as an
   attribute or a string anywhere live (getattr), is a dunder, overrides a member of a library
   ancestor (nn.Module's forward, logging.Handler's emit: Settings.inherited; every member of
   a class whose metaclass reads its body: an Enum's), is read by bare name in its class's body
   (`DOUBLE = SCALE * 2`, `@span.setter`), or is one that duck-typed library code calls
   (PROTOCOL_METHODS: contextlib.closing's close, print's write, `**`'s keys). A definition
   whose decorator may register it (not PURE_DECORATORS) and a star import are always kept.
6. The result is unparsed (`ast.unparse`), each definition and constant the specialiser left as
   written put back in its original text, comments included (`as_written`), opened by a
   docstring that says what it was made from and how to rebuild it, and formatted by ruff: the
   script the runs run and a record ships
   (`write_run_script`, `records/submission.py specialize`). Its counted form is it minified
   with the record's options, its local and
   module-level names renamed too (SPECIALIZED_MINIFY: nothing imports it or reads it), and so
   are the parameters no call names and the attributes only its plain classes use on `self`
   (records/golf/shorten.py), and
   packed as the record's form (records/golf/pack.py: `record_pack_source`): its bytes are the
   counted code.

7. What no pass models is refused, every line named (`check_modelled`): names reached by text
   (eval, globals, attrgetter, a method called through a computed getattr, `{0.x}` formats),
   code run unseen (`__getattr__`, `__set_name__`, `__init_subclass__`, a metaclass,
   singledispatch) and `match`. What the passes assume and do not check: reading an attribute,
   comparing, testing truth, formatting and arithmetic have no effects and raise nothing in a
   run that works (a property with effects, an `__eq__` that prints, a `1 / 0` in a dropped
   operand are not modelled); an import and an unused module-level assignment's value only
   bind their names; a library method called on an instance runs no method of ours but those
   it overrides. The counted form (never run) also renames the classes and functions, so a
   `type(e).__name__` or a dataclass's repr in it spells their short names.
   tests/test_fold_soundness.py runs a program for each found hole both ways.

`python benchmarks/specialized_size.py` prints the table of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import abc
import ast
import builtins
import contextlib
import copy
import dataclasses
import functools
import hashlib
import importlib.util
import os
import shutil
import string
import subprocess
import sys
import textwrap
from pathlib import Path

from .errors import SubmissionError
from .fold import (
    Fold,
    FoldBodies,
    InlineConstantCalls,
    binding_counts,
    bound_anywhere,
    bound_names,
    bound_once,
    class_scope_reads,
    constant_arguments,
    constant_attributes,
    constant_functions,
    drop_dead_locals,
    fold_local_tables,
    idle_hooks,
    is_const,
    is_super_init,
    known_attributes,
    literal,
    node_of,
    propagate_locals,
    prune_checks,
    scopes,
    table_rows,
    unused_defaults,
    walk,
)
from .shorten import shortened

# What a reproduction of a run may set to other values: where the data is, the log's name, the seed.
FREE = ("data_path", "tokenizer_path", "run_id", "seed")
# What a run on a pod may need and a record does not fix, by what it is for: free too, unless
# its code would put the preset's counted code over its record's own (POD_BUILT_IN)
POD_SETTINGS = {
    "checkpoints and resuming": ("checkpoint_every", "checkpoint_dir", "resume_from"),
    "evaluation-only re-scoring": ("eval_only_path",),
}
# The records' own counted code (their logs' `Code size (compressed)`), for the table.
RECORDS_OWN = {"pr1855": 31_999, "pr2014": 38_134, "pr2135": 37_155}
# preset -> the pod settings built in (at the run's values: off) because their code does not fit
# under RECORDS_OWN: measured in benchmarks/RESULTS.md ("The pod's settings"). #1855 keeps its
# margin (49 B) only without both; #2135 fits both (35,623 of 37,155 B) since an EVAL_ONLY_PATH
# file is read as the run's COMPRESSOR and QUANTIZER write it (the other formats' code folds away).
POD_BUILT_IN = {
    "pr1855": ("checkpoints and resuming", "evaluation-only re-scoring"),
}
SETTINGS_CLASS_METHOD = "from_env"
# The function that declares a setting: `name: type = setting(default, group=, help=, bounds...)`
# (or default_factory= for the default) is dataclasses.field(default=..., metadata={bounds...})
# with notes that only document it (--help): a free field is written as that plain field
SETTING_FUNCTION = "setting"
SETTING_NOTES = ("group", "help")  # the settings class is the one defining it
# The readable script's --help (every setting, from its source): a specialised script's says what
# it is instead
HELP_FUNCTION = "settings_help"
# The readable script's count of its own code bytes (the record's rule: minified, compressed,
# wrapped); a specialised script ships packed, so it counts its own file as it is
CODE_BYTES_FUNCTION = "counted_code_bytes"
# The function that says whether the script takes another value of a variable (an error's
# advice depends on it): a call of it on a constant name is the answer, in a specialised
# script only the free settings' variables
SETTABLE_FUNCTION = "settable"
# The module's table of every field's readable default ({f.name: f.default for f in FIELDS}): the
# specialised settings class keeps those defaults, so a lookup of a constant key folds to it
DEFAULTS_TABLE = "DEFAULTS"
# Methods that code not ours calls on objects that need not inherit from it (duck typing:
# contextlib.closing's close, a thread target's run, print's and json.dump's write and flush, a
# `**mapping`'s keys, a logging filter's filter); a method overriding one of a base class not
# ours (nn.Module's forward, an optimizer's step) is kept by Settings.inherited
PROTOCOL_METHODS = frozenset(
    {"close", "run", "forward", "step", "state_dict", "load_state_dict", "write", "flush", "read",
     "readline", "fileno", "keys", "filter", "emit", "handle"}
)  # fmt: skip


# -----------------------------
# SETTINGS
# -----------------------------


def load_module(path: Path):
    """The script at `path` as a fresh module (its import has no side effects, by its rules)."""
    name = f"_specialize_{hashlib.sha256(str(path).encode()).hexdigest()[:12]}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # (dataclasses look their module up)
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(name, None)
    return module


def settings_class(module):
    found = [v for v in vars(module).values() if isinstance(v, type) and SETTINGS_CLASS_METHOD in
             vars(v) and dataclasses.is_dataclass(v)]  # fmt: skip
    if len(found) != 1:
        raise SubmissionError(
            f"cannot specialise: expected one dataclass with {SETTINGS_CLASS_METHOD}"
        )
    return found[0]


@dataclasses.dataclass
class Settings:
    """What the transform needs to know about a run: every field's frozen value and default."""

    cls_name: str
    values: dict  # field -> the run's value (every field)
    defaults: dict  # field -> the readable default (dataclasses.MISSING for a factory)
    properties: dict  # property -> value, for those that only depend on frozen fields
    file_constants: dict  # module constant -> literal value (read from files at import)
    file_calls: dict  # module function reading files beside the script -> the function
    free: tuple = FREE
    # The fixed variables' table the script refuses by (name -> (accepted values, why)), as
    # name -> accepted values: a specialised script's refusal names the value, not the reason
    fixed_table: dict | None = None
    # module class -> the names its bases not of the module define (inherited_members): a
    # method of such a name overrides what that code calls, so it is kept
    inherited: dict = dataclasses.field(default_factory=dict)

    @property
    def frozen(self) -> dict:
        return {k: v for k, v in self.values.items() if k not in self.free}


def resolve_values(module, env: dict, world_size: int = 8) -> dict:
    """Every field's value for `env`, as the script resolves it (its own from_env)."""
    cls = settings_class(module)
    cfg = cls.from_env({"RUN_ID": "specialize", **env}, world_size)
    return dataclasses.asdict(cfg)


def free_settings(preset: str) -> tuple[str, ...]:
    """The fields a script specialised to `preset` leaves free: FREE and the pod's settings but
    those POD_BUILT_IN builds in for it."""
    built_in = POD_BUILT_IN.get(preset, ())
    return free_with([what for what in POD_SETTINGS if what not in built_in])


def free_with(groups) -> tuple[str, ...]:
    """FREE and the fields of these groups of POD_SETTINGS."""
    return (*FREE, *(name for what in groups for name in POD_SETTINGS[what]))


def settings_for(module, values: dict, free=None) -> Settings:
    """The Settings of a run of `module` whose fields have `values` (missing ones: defaults);
    `free`: the fields left free (default: free_settings of the run's preset)."""
    cls = settings_class(module)
    fields = dataclasses.fields(cls)
    unknown = set(values) - {f.name for f in fields}
    if unknown:
        raise SubmissionError(f"cannot specialise: no such setting(s) {', '.join(sorted(unknown))}")
    if free is None:
        names = {f.name for f in fields}
        free = [n for n in free_settings(values.get("preset") or "") if n in names]
    cfg = cls(**values)
    values = dataclasses.asdict(cfg)
    other = dataclasses.replace(cfg, **_other_free_values(cfg, free))
    properties = {}
    tree = ast.parse(Path(module.__file__).read_text())  # (read once for the three below)
    pure = pure_properties(tree, cls.__name__, module)
    for name, attr in vars(cls).items():
        if isinstance(attr, (property, functools.cached_property)) and name in pure:
            with contextlib.suppress(Exception):
                value = getattr(cfg, name)
                if literal(value) and value == getattr(other, name):
                    properties[name] = value
    return Settings(
        cls.__name__,
        values,
        {f.name: f.default for f in fields},
        properties,
        file_constants(module, tree),
        file_calls(module, tree),
        tuple(free),
        fixed_table=_fixed_table(getattr(module, "FIXED_VARIABLES", None)),
        inherited=inherited_members(module),
    )


def inherited_members(module) -> dict[str, frozenset]:
    """For each class of `module`, the member names of its ancestors defined elsewhere (a
    library's: nn.Module's forward, json.JSONEncoder's default): the code there calls them."""
    out = {}
    for name, cls in vars(module).items():
        if isinstance(cls, type) and cls.__module__ == module.__name__:
            outside = [b for b in cls.__mro__[1:] if b.__module__ != module.__name__]
            out[name] = frozenset(m for base in outside for m in vars(base))
            if type(cls) not in (type, abc.ABCMeta):  # its metaclass reads the body (Enum's)
                out[name] |= frozenset(vars(cls))
    return out


# The decorators of a settings-class method that make it a property (evaluated once per run:
# the plans Hyperparameters parses once are cached properties)
PROPERTY_DECORATORS = frozenset({"property", "functools.cached_property"})
# What a property may call and still be evaluated here (settings_for): functions of their
# arguments alone, the same on every machine
PURE_CALLS = frozenset(
    {"int", "float", "str", "bool", "len", "max", "min", "abs", "round", "repr", "sorted",
     "tuple", "list", "dict", "set", "frozenset", "zip", "range", "enumerate", "any", "all",
     "sum", "map", "filter", "reversed", "isinstance", "os.path.join", "contextlib.suppress"}
)  # fmt: skip
PURE_METHODS = frozenset(  # of strings, lists, tuples and dicts: they read their object alone
    {"startswith", "endswith", "upper", "lower", "strip", "lstrip", "rstrip", "replace", "split",
     "rsplit", "join", "format", "partition", "count", "index", "get", "keys", "values", "items"}
)  # fmt: skip
PURE_MODULES = frozenset({"math"})  # their attributes are constants (math.inf)


def pure_properties(tree: ast.Module, cls_name: str, module) -> set[str]:
    """The properties of the settings class whose getter only computes from `self`'s fields,
    literal module constants and PURE_CALLS (no files, no environment, no clock): evaluated
    once here they are what the run computes; the others stay code."""
    cls = next((s for s in tree.body if isinstance(s, ast.ClassDef) and s.name == cls_name), None)
    out = set()
    for stmt in cls.body if cls is not None else ():
        getter = None
        if isinstance(stmt, ast.FunctionDef) and PROPERTY_DECORATORS & {
            ast.unparse(d) for d in stmt.decorator_list
        }:
            getter = stmt
        elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            value = stmt.value
            is_property = isinstance(value, ast.Call) and ast.unparse(value.func) == "property"
            if is_property and len(value.args) == 1 and isinstance(value.args[0], ast.Lambda):
                getter = value.args[0]
        if getter is not None and _pure_getter(getter, module):
            out.add(stmt.name if isinstance(stmt, ast.FunctionDef) else stmt.targets[0].id)
    return out


def _pure_getter(getter, module) -> bool:
    local = {a.arg for a in _all_args(getter.args)}
    for node in walk(getter):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            local.add(node.id)
    calls = [n for n in walk(getter) if isinstance(n, ast.Call)]
    allowed = set()  # the function parts of the calls above: not reads of their own
    for decorator in getattr(getter, "decorator_list", ()):  # (another is code that runs)
        if ast.unparse(decorator) in PROPERTY_DECORATORS:
            allowed.update(id(n) for n in walk(decorator))
    for call in calls:
        name = ast.unparse(call.func)
        on_self = name == "getattr" and call.args and ast.unparse(call.args[0]) == "self"
        if (name in PURE_CALLS and name != "getattr") or on_self:
            allowed.update(id(n) for n in walk(call.func))
        elif not (
            isinstance(call.func, ast.Attribute)
            and call.func.attr in PURE_METHODS
            and ast.unparse(call.func.value) != "self"  # (the class's own: any code)
        ):
            return False  # (a method of those: its object is read below)
    for node in walk(getter):
        if id(node) in allowed:
            continue
        if isinstance(node, (ast.Global, ast.Nonlocal, ast.Yield, ast.YieldFrom, ast.Await)):
            return False
        if isinstance(node, ast.Attribute) and not isinstance(node.ctx, ast.Load):
            return False
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in local:
            value = getattr(module, node.id, None)
            if not (literal(value) or getattr(value, "__name__", None) in PURE_MODULES):
                return False
    return True


def _fixed_table(table) -> dict | None:
    if not isinstance(table, dict):
        return None
    return {name: tuple(accepted) for name, (accepted, _why) in table.items()}


def _other_free_values(cfg, free) -> dict:
    """Other values for the free fields, to tell which properties depend on them."""
    out = {}
    for name in free:
        value = getattr(cfg, name)
        if isinstance(value, bool):
            out[name] = not value
        elif isinstance(value, (int, float)):
            out[name] = value + 1
        elif isinstance(value, str):
            out[name] = value + "/other"
    return out


def file_derived(tree: ast.Module) -> set[str]:
    """Module names computed from files beside the script: constants whose expression uses
    `__file__` (or such a name), and small readers of them (presets/): functions with
    parameters that use such a constant and call nothing but builtins, methods and each other."""
    derived = {"__file__"}
    functions = [s for s in tree.body if isinstance(s, ast.FunctionDef)]
    helpers = {f.name for f in functions if _a_reader(f, set())}  # (builtins and methods only)
    while True:
        size = len(derived)
        for stmt in tree.body:
            names = bound_names(stmt)
            if isinstance(stmt, ast.FunctionDef):
                uses_files = _names_in(stmt) & (derived - {"__file__"})
                if uses_files and _a_reader(stmt, derived, helpers):
                    derived.add(stmt.name)
            elif names and _names_in(getattr(stmt, "value", None) or ast.Pass()) & derived:
                derived.update(names)
        if len(derived) == size:
            return derived


def _a_reader(fn: ast.FunctionDef, derived: set, helpers=frozenset()) -> bool:
    """A function of parameters calling only builtins, methods, `derived` and `helpers`."""
    if not fn.args.args:
        return False
    for call in (n for n in walk(fn) if isinstance(n, ast.Call)):
        if isinstance(call.func, ast.Name):
            name = call.func.id
            if name not in derived and name not in helpers and not hasattr(builtins, name):
                return False
    return True


def _names_in(node) -> set[str]:
    return {n.id for n in walk(node) if isinstance(n, ast.Name)}


def file_constants(module, tree: ast.Module) -> dict:
    """The values of the file-derived module constants (`file_derived`) that are literals (a
    record folder has no presets/ beside its script), and of the tables of settings built by code
    (`built_dicts`): they become literals."""
    derived, out = file_derived(tree), {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and not isinstance(stmt.value, ast.Constant):
            for name in set(bound_names(stmt)) & derived:
                if literal(value := getattr(module, name, None)):
                    out[name] = value
    return out | built_dicts(tree, module) | declaration_constants(tree, module)


def built_dicts(tree: ast.Module, module) -> dict:
    """Tables of settings built by code (`PR2014 = PR1855 | dict(...)`, a table of such dicts):
    as literals, their lookups on constant keys fold and the tables go when unused.

    Sound only where every machine builds the same table: its expression is made of literals,
    `dict(...)` of them, `|` and names of such tables bound once before it (`_built_of_literals`).
    A table built from anything else (`dict(os.environ)`: the packing machine's environment,
    secrets included) stays the code that builds it."""
    bound = binding_counts(tree)
    out, known = {}, set()
    if "dict" in bound:  # (dict(...) is not the builtin)
        return out
    for stmt in tree.body:
        names = bound_names(stmt)
        if not (isinstance(stmt, ast.Assign) and len(names) == 1 and bound[names[0]] == 1):
            continue
        if not _built_of_literals(stmt.value, known):
            continue
        known.add(names[0])
        value = getattr(module, names[0], None)
        if isinstance(value, dict) and value and literal(value) and _settings_table(value):
            out[names[0]] = value
    return out


def declaration_constants(tree: ast.Module, module) -> dict:
    """Module constants computed from the settings' declarations, as literals. They read a
    field's `.metadata` (its group, help and bounds: `RESUME_SETTINGS`, the fields a resume
    keeps by their groups), which the specialised settings class does not declare, so in the
    specialised script the same expression would fail.

    Sound where every machine computes the same value: the expression calls nothing but
    PURE_CALLS, `dataclasses.fields` and PURE_METHODS, and reads, beyond its own comprehension
    variables, only the settings class's fields (`dataclasses.fields` of it, bound once) and
    tables of declarations (`_declaration_table`: literals and the module's NamedTuples of
    them, bound once). Anything else stays code."""
    bound = binding_counts(tree)
    cls = settings_class(module)
    tuples = {
        s.name for s in tree.body if isinstance(s, ast.ClassDef)
        and any(ast.unparse(b) in ("NamedTuple", "typing.NamedTuple") for b in s.bases)
    }  # fmt: skip
    statements = {bound_names(s)[0]: s for s in tree.body
                  if isinstance(s, ast.Assign) and len(bound_names(s)) == 1}  # fmt: skip

    def declared(name: str) -> bool:
        if bound.get(name) != 1 or name not in statements:
            return False
        if getattr(module, name, None) == dataclasses.fields(cls):
            return True
        return _declaration_table(statements[name].value, tuples)

    out = {}
    for name, stmt in statements.items():
        nodes = list(walk(stmt.value))
        if bound.get(name) != 1 or not any(
            isinstance(n, ast.Attribute) and n.attr == "metadata" for n in nodes
        ):
            continue
        calls = {
            ast.unparse(n.func)
            for n in nodes
            if isinstance(n, ast.Call)
            and not (isinstance(n.func, ast.Attribute) and n.func.attr in PURE_METHODS)
        }
        own = {n.id for n in nodes if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        reads = {n.id for n in nodes if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        reads -= own | PURE_CALLS | {"dataclasses"}  # (a method's object is among the reads)
        pure = calls <= PURE_CALLS | {"dataclasses.fields"} and all(map(declared, reads))
        if pure and literal(value := getattr(module, name, None)):
            out[name] = value
    return out


def _declaration_table(node, tuples: set) -> bool:
    """Literals, and calls of the module's NamedTuple classes (`tuples`) on literals only."""
    for n in walk(node):
        if isinstance(n, ast.Call):
            if not (isinstance(n.func, ast.Name) and n.func.id in tuples):
                return False
        elif isinstance(n, ast.Name):
            if n.id not in tuples:
                return False
        elif not isinstance(n, (ast.Constant, ast.Dict, ast.Tuple, ast.List, ast.keyword,
                                ast.Load)):  # fmt: skip
            return False
    return True


def _built_of_literals(node, known: set) -> bool:
    """An expression of literals, `dict(...)` of them, `|` and names in `known` (tables of the
    same kind): what it builds is the same on any machine."""
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.Name):
        return node.id in known
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _built_of_literals(node.left, known) and _built_of_literals(node.right, known)
    if isinstance(node, (ast.Tuple, ast.List)):
        return all(_built_of_literals(e, known) for e in node.elts)
    if isinstance(node, ast.Dict):
        parts = [*node.values, *(k for k in node.keys if k is not None)]
        return None not in node.keys and all(_built_of_literals(p, known) for p in parts)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict":
        parts = [*node.args, *(k.value for k in node.keywords)]
        named = all(k.arg is not None for k in node.keywords)  # (no **mapping)
        return named and all(_built_of_literals(p, known) for p in parts)
    return False


def _settings_table(table: dict) -> bool:
    return all(
        isinstance(v, str) or (isinstance(v, dict) and _settings_table(v)) for v in table.values()
    )


def file_calls(module, tree: ast.Module) -> dict:
    """The file-derived functions (`file_derived`), to evaluate on constant arguments."""
    derived = file_derived(tree)
    return {
        s.name: getattr(module, s.name)
        for s in tree.body
        if isinstance(s, ast.FunctionDef) and s.name in derived
    }


# -----------------------------
# 2. CONFIG READS
# -----------------------------


class ConfigReads(ast.NodeTransformer):
    """`<cfg>.field` and `<cfg>.property` to constants; `self.` inside the settings class."""

    def __init__(self, settings: Settings):
        self.settings, self.constants = settings, {**settings.frozen, **settings.properties}
        self.in_class = False

    def visit_ClassDef(self, node):
        outer, self.in_class = self.in_class, node.name == self.settings.cls_name or self.in_class
        self.generic_visit(node)
        self.in_class = outer
        return node

    def is_cfg(self, node) -> bool:
        if isinstance(node, ast.Name):
            return node.id == "cfg" or (self.in_class and node.id == "self")
        return isinstance(node, ast.Attribute) and node.attr == "cfg"

    def visit_Attribute(self, node):
        self.generic_visit(node)
        if (
            isinstance(node.ctx, ast.Load)
            and node.attr in self.constants
            and self.is_cfg(node.value)
        ):
            return node_of(self.constants[node.attr])
        return node

    def visit_Call(self, node):  # settable("NAME"): whether this script takes NAME
        self.generic_visit(node)
        named = isinstance(node.func, ast.Name) and node.func.id == SETTABLE_FUNCTION
        if named and len(node.args) == 1 and is_const(node.args[0]) and not node.keywords:
            return ast.Constant(str(node.args[0].value).lower() in self.settings.free)
        return node

    def visit_Subscript(self, node):  # DEFAULTS["name"]: the readable default
        self.generic_visit(node)
        table = isinstance(node.value, ast.Name) and node.value.id == DEFAULTS_TABLE
        if table and is_const(node.slice) and isinstance(node.ctx, ast.Load):
            default = self.settings.defaults.get(node.slice.value, dataclasses.MISSING)
            if default is not dataclasses.MISSING and literal(default):
                return node_of(default)
        return node


SETTINGS_NAME = "cfg"  # the name (and attribute) ConfigReads takes for the run's settings


# What reaches names by text or runs code the passes cannot see, each with why: a script using
# one is refused (check_modelled), as no pass could prove what it would change
UNMODELLED_NAMES = {
    "eval": "runs code from text",
    "exec": "runs code from text",
    "globals": "looks names up by text",
    "__import__": "imports by text",
    "attrgetter": "reads attributes named by text",
    "methodcaller": "calls methods named by text",
    "singledispatch": "dispatches on annotations, which the specialiser strips",
}
UNMODELLED_MEMBERS = {
    "__getattr__": "answers attributes no code names",
    "__getattribute__": "answers attributes no code names",
    "__set_name__": "sees its attribute's name",
    "__init_subclass__": "runs code when a class is defined",
}


def check_modelled(tree: ast.Module) -> None:
    """Refuse a script that does what the passes do not model (the names it reaches by text, the
    code it runs unseen): every such line, in one error."""
    found = []
    for n in walk(tree):
        name = _library_name(n)
        if name in UNMODELLED_NAMES:
            found.append((n.lineno, f"{name} {UNMODELLED_NAMES[name]}"))
        elif isinstance(n, ast.Call) and _computed_getattr(n.func):
            found.append((n.lineno, "a method called by a computed name (getattr(x, name)(...))"))
        elif isinstance(n, ast.Match):
            found.append((n.lineno, "a match statement binds and reads attributes by pattern"))
        elif (
            isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name in UNMODELLED_MEMBERS
        ):
            found.append((n.lineno, f"{n.name} {UNMODELLED_MEMBERS[n.name]}"))
        elif isinstance(n, ast.ClassDef) and any(k.arg == "metaclass" for k in n.keywords):
            found.append((n.lineno, "a metaclass runs code when a class is defined"))
        elif is_const(n) and isinstance(n.value, str) and _formats_attributes(n.value):
            found.append((n.lineno, "a format string reads attributes by name ({0.x})"))
    if found:
        lines = "; ".join(f"line {line}: {what}" for line, what in sorted(set(found)))
        raise SubmissionError(f"cannot specialise: {lines}; write it with plain names")


def _library_name(node) -> str | None:
    """The builtin or library function `node` names: `eval`, `operator.attrgetter` (not a method
    of an object: `model.eval`)."""
    if isinstance(node, ast.Attribute) and getattr(node.value, "id", "") in LIBRARY_MODULES:
        return node.attr
    return node.id if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) else None


LIBRARY_MODULES = ("operator", "functools", "builtins")


def _computed_getattr(func) -> bool:
    return (
        isinstance(func, ast.Call)
        and getattr(func.func, "id", "") == "getattr"
        and len(func.args) >= 2
        and not is_const(func.args[1])
    )


def _formats_attributes(text: str) -> bool:
    """Whether `text`, as a str.format template, reads an attribute (`{0.width}`, `{p.x}`)."""
    with contextlib.suppress(ValueError):
        return any(
            field and "." in field.split("[")[0].split("!")[0]
            for _, field, _, _ in string.Formatter().parse(text)
        )
    return False


def check_settings_names(tree: ast.Module, settings: Settings) -> None:
    """Refuse a script where ConfigReads' premise may not hold: that every `cfg` name and `.cfg`
    attribute is the run's settings, one instance with the frozen values. It holds when, outside
    the settings class,

    - no code builds an instance (`Cls(...)`), and no `replace` of one (`dataclasses.replace`,
      `copy.replace`) or `setattr` changes a frozen field;
    - every binding of `cfg` (assignment, loop, `with`, walrus, lambda) and every store of `.cfg`
      is of a settings expression: `cfg`, `<anything>.cfg`, `Cls.from_env(...)`, a `replace` of
      one changing only free fields, or a call of a module function every return of which gives
      one there (`cfg, rt = configure()`);
    - a parameter named `cfg` is annotated with the class or not at all, and each call this
      module makes of its function (by its name, its class's or `super().__init__` for
      `__init__`, an attribute of a method's name) passes it a settings expression.

    Calls made through values (functools.partial, a thread's target) are not followed: a
    function taking `cfg` is called through one only with what its direct callers pass.
    """
    problems = SettingsNames(tree, settings).problems()
    if problems:
        line, what = problems[0]
        raise SubmissionError(
            f"cannot specialise: line {line}: {what}; the specialiser takes every "
            f"`{SETTINGS_NAME}` for the run's {settings.cls_name}: rename that {SETTINGS_NAME}, or "
            "give it the run's settings"
        )


def _all_args(args: ast.arguments) -> list[ast.arg]:
    rest = [a for a in (args.vararg, args.kwarg) if a is not None]
    return [*args.posonlyargs, *args.args, *args.kwonlyargs, *rest]


def _is_replace(call: ast.Call) -> bool:
    """dataclasses.replace(...), copy.replace(...) or a `replace` imported from them."""
    func = call.func
    if isinstance(func, ast.Attribute):
        module = isinstance(func.value, ast.Name) and func.value.id in ("dataclasses", "copy")
        return func.attr == "replace" and module
    return isinstance(func, ast.Name) and func.id == "replace"


def _cfg_positions(fn, skip: int) -> set[int]:
    positional = [*fn.args.posonlyargs, *fn.args.args][skip:]
    return {i for i, arg in enumerate(positional) if arg.arg == SETTINGS_NAME}


NEW_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def _returns(fn) -> list[ast.expr | None]:
    """What `fn`'s return statements return (not those of functions defined inside it)."""
    out, todo = [], list(fn.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Return):
            out.append(node.value)
        elif not isinstance(node, NEW_SCOPES):
            todo.extend(ast.iter_child_nodes(node))
    return out


class SettingsNames:
    """check_settings_names' reading of a module: its functions, their `cfg` parameters."""

    def __init__(self, tree: ast.Module, settings: Settings):
        self.tree, self.cls_name, self.frozen = tree, settings.cls_name, set(settings.frozen)
        self.functions = {s.name: s for s in tree.body if isinstance(s, ast.FunctionDef)}
        self.classes = {s.name: s for s in tree.body if isinstance(s, ast.ClassDef)}
        # (how it is called: "name", "attr", "init" for super().__init__; its name) -> where
        # the function takes cfg among the arguments a call passes
        self.takers: dict[tuple[str, str], set[int]] = {}
        methods = {id(f) for c in walk(tree) if isinstance(c, ast.ClassDef) for f in c.body}
        for fn in walk(tree):  # functions at any depth, by their name (a call of a nested one)
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and id(fn) not in methods:
                self._take(("name", fn.name), _cfg_positions(fn, 0))
        for cls in self.classes.values():
            for fn in (f for f in cls.body if isinstance(f, ast.FunctionDef)):
                static = any(ast.unparse(d) == "staticmethod" for d in fn.decorator_list)
                positions = _cfg_positions(fn, 0 if static else 1)
                if fn.name == "__init__":
                    self._take(("name", cls.name), positions)
                    self._take(("init", cls.name), positions)
                else:
                    self._take(("attr", fn.name), positions)

    def _take(self, key, positions: set[int]) -> None:
        if positions:
            self.takers.setdefault(key, set()).update(positions)

    def problems(self) -> list[tuple[int, str]]:
        inside = self.classes.get(self.cls_name)
        skipped = {id(n) for n in walk(inside)} if inside is not None else set()
        out = []
        for cls in self.classes.values():
            if cls.name != self.cls_name:
                out += self._super_init_problems(cls)
        for node in walk(self.tree):
            if id(node) not in skipped:
                out += [(getattr(node, "lineno", 0), what) for what in self._node_problems(node)]
        return sorted(out)

    def _node_problems(self, node) -> list[str]:
        out = []
        if isinstance(node, ast.Call):
            out += self._call_problems(node, self.takers.get(self._callee_key(node), ()))
            if self._callee_key(node) == ("name", self.cls_name):
                out.append(f"builds a {self.cls_name} of its own")
        for target, value, index in self._bindings(node):
            if not self._gives_settings(value, index):
                out.append(f"binds {ast.unparse(target)} to something else")
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for arg in _all_args(node.args):
                annotation = arg.annotation
                named = annotation is None or ast.unparse(annotation).strip("'\"") == self.cls_name
                if arg.arg == SETTINGS_NAME and not named:
                    out.append(f"takes a cfg of type {ast.unparse(annotation)}")
        return out

    def _super_init_problems(self, cls: ast.ClassDef) -> list[tuple[int, str]]:
        positions = set()
        for base in cls.bases:
            if isinstance(base, ast.Name):
                positions |= self.takers.get(("init", base.id), set())
        calls = [n for n in walk(cls) if isinstance(n, ast.Call) and is_super_init(n)]
        return [(c.lineno, what) for c in calls for what in self._call_problems(c, positions)]

    def _callee_key(self, call: ast.Call) -> tuple[str, str] | None:
        if isinstance(call.func, ast.Name):
            return ("name", call.func.id)
        if isinstance(call.func, ast.Attribute) and not is_super_init(call):
            return ("attr", call.func.attr)
        return None

    def settings_expression(self, node) -> bool:
        """`cfg`, `x.cfg`, `Cls.from_env(...)`, or a replace of one changing only free fields."""
        if isinstance(node, ast.Name):
            return node.id == SETTINGS_NAME
        if isinstance(node, ast.Attribute):
            return node.attr == SETTINGS_NAME
        if not isinstance(node, ast.Call):
            return False
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == SETTINGS_CLASS_METHOD:
            return isinstance(func.value, ast.Name) and func.value.id in (self.cls_name, "cls")
        if _is_replace(node) and node.args:
            return not self._changes_frozen(node) and self.settings_expression(node.args[0])
        return False

    def _changes_frozen(self, replace: ast.Call) -> bool:
        changed = {k.arg for k in replace.keywords}
        return None in changed or bool(changed & self.frozen)

    def _gives_settings(self, value, index: int | None = None) -> bool:
        """`value` (the element `index` of it) is a settings expression, or a call of a module
        function every return of which gives one there."""
        if value is None:
            return False
        if index is not None:
            if isinstance(value, (ast.Tuple, ast.List)):
                return index < len(value.elts) and self._gives_settings(value.elts[index])
            if not isinstance(value, ast.Call):
                return False
        elif self.settings_expression(value):
            return True
        named = isinstance(value, ast.Call) and isinstance(value.func, ast.Name)
        fn = self.functions.get(value.func.id) if named else None
        if fn is None:
            return False
        returns = _returns(fn)
        return bool(returns) and all(self._gives_settings(r, index) for r in returns)

    def _call_problems(self, call: ast.Call, positions) -> list[str]:
        """A replace or setattr of a frozen field; a `cfg` argument not a settings expression."""
        out = []
        if _is_replace(call) and self._changes_frozen(call):
            out.append("replaces a frozen setting")
        setter = isinstance(call.func, ast.Name) and call.func.id == "setattr"
        setter |= isinstance(call.func, ast.Attribute) and call.func.attr == "__setattr__"
        if setter and call.args and self.settings_expression(call.args[0]):
            out.append("sets a field of the settings")
        passed = [k.value for k in call.keywords if k.arg == SETTINGS_NAME]
        for index in positions:
            if any(isinstance(a, ast.Starred) for a in call.args[: index + 1]):
                out.append("passes *args where a function takes cfg")
            elif index < len(call.args):
                passed.append(call.args[index])
        bad = [p for p in passed if not self._gives_settings(p)]
        return out + [f"passes {ast.unparse(p)} as cfg" for p in bad]

    def _bindings(self, node) -> list[tuple[ast.expr, ast.expr | None, int | None]]:
        """(target, value, index) for each binding of the name `cfg` or store of `.cfg` that
        `node` makes: the value that gives it (None where no expression does: a loop, an except
        clause), and which element of it when a call's result is unpacked."""
        if isinstance(node, ast.Assign):
            return [pair for target in node.targets for pair in _paired(target, node.value)]
        if isinstance(node, (ast.AnnAssign, ast.NamedExpr)):
            return _paired(node.target, node.value)
        unknown = None
        if isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension, ast.AugAssign)):
            unknown = node.target
        elif isinstance(node, ast.withitem):
            unknown = node.optional_vars
        if unknown is not None:
            return _paired(unknown, None)
        names = []
        if isinstance(node, ast.Lambda):
            names = [a.arg for a in _all_args(node.args)]
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names = [node.name]
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.asname or a.name.split(".")[0] for a in node.names]
        return [(ast.Name(n), None, None) for n in names if n == SETTINGS_NAME]


def _paired(target, value) -> list[tuple[ast.expr, ast.expr | None, int | None]]:
    """The `cfg` targets among `target`, with the value that gives each (SettingsNames._bindings):
    a tuple's element where a tuple is unpacked, a call's result and the index unpacked from it."""
    if isinstance(target, ast.Starred):
        return _paired(target.value, None)
    if not isinstance(target, (ast.Tuple, ast.List)):
        is_name = isinstance(target, ast.Name) and target.id == SETTINGS_NAME
        is_attr = isinstance(target, ast.Attribute) and target.attr == SETTINGS_NAME
        return [(target, value, None)] if is_name or is_attr else []
    out = []
    for i, element in enumerate(target.elts):
        if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts):
            out += _paired(element, value.elts[i])
        elif isinstance(value, ast.Call) and not isinstance(element, (ast.Tuple, ast.List)):
            out += [(t, value, i) for t, _, _ in _paired(element, value)]
        else:
            out += _paired(element, None)
    return out


# -----------------------------
# 3. THE SETTINGS CLASS
# -----------------------------

FROM_ENV = """
@classmethod
def from_env(cls, env=os.environ, world_size=1):
    fields = {{f.name.upper(): f for f in dataclasses.fields(cls)}}
    types = get_type_hints(cls)
    values = {{n: parse_value(n, env[n], types[f.name]) for n, f in fields.items() if n in env}}
    frozen = {{n: f.default for n, f in fields.items() if n.lower() not in {free!r}}}
    frozen |= {{n.upper(): v for n, v in {changed!r}.items()}}
    refused = [{refusal} for n, v in frozen.items() if n in values and values[n] != v]
    refused += [f"{{n}}={{env[n]!r}}: not read here (fixed at {{accepted[0]!r}}); unset it"
                for n, accepted in {fixed}.items() if env.get(n, accepted[0]) not in accepted]
    if refused:
        raise ConfigError("; ".join(refused))
    cfg = cls(**{{n.lower(): v for n, v in (frozen | values).items()}})
    cfg.validate(world_size)
    return cfg
"""
REFUSAL_EXPR = (
    'f"{n}={env[n]}: this script is specialised to '
    '{n}={int(v) if type(v) is bool else v or repr(v)}; the readable train_gpt.py takes others"'
)


def rewrite_settings_class(tree: ast.Module, settings: Settings) -> None:
    cls = next(
        (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == settings.cls_name), None
    )
    if cls is None:
        raise SubmissionError(f"cannot specialise: no class {settings.cls_name} at module level")
    frozen = settings.frozen
    for i, stmt in enumerate(cls.body):
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            name = stmt.target.id
            default = settings.defaults.get(name, dataclasses.MISSING)
            if name in frozen and default is not dataclasses.MISSING and literal(default):
                stmt.value = node_of(default)  # its bounds and notes go: the value is fixed
            elif _declared(stmt.value):  # a free field: its bounds stay, its notes go
                stmt.value = _plain_field(stmt.value)
        if isinstance(stmt, ast.FunctionDef) and stmt.name == SETTINGS_CLASS_METHOD:
            # (lower case, as the fields above: they compress against them)
            changed = {k: v for k, v in frozen.items() if not _same(v, settings.defaults.get(k))}
            fixed = "FIXED_VARIABLES" if settings.fixed_table is not None else "{}"
            code = FROM_ENV.format(
                free=tuple(settings.free), changed=changed, refusal=REFUSAL_EXPR, fixed=fixed
            )
            cls.body[i] = ast.parse(code).body[0]


def _plain_field(call: ast.Call) -> ast.expr:
    """A free field's declaration as the dataclass field it returns (SETTING_FUNCTION's contract),
    its bounds as the metadata, without its notes: the default alone when it has no bounds."""
    keywords = [k for k in call.keywords if k.arg not in SETTING_NOTES]
    factory = [k for k in keywords if k.arg == "default_factory"]
    bounds = [k for k in keywords if k.arg != "default_factory"]
    if call.args and not keywords:
        return call.args[0]
    field_keywords = [ast.keyword("default", call.args[0])] if call.args else []
    field_keywords += factory
    if bounds:
        metadata = ast.Dict([ast.Constant(k.arg) for k in bounds], [k.value for k in bounds])
        field_keywords.append(ast.keyword("metadata", metadata))
    field = ast.Attribute(ast.Name("dataclasses", ast.Load()), "field", ast.Load())
    return ast.Call(field, [], field_keywords)


def _declared(value) -> bool:
    """A field's value is a call of the declaration function (SETTING_FUNCTION)."""
    call = isinstance(value, ast.Call) and isinstance(value.func, ast.Name)
    return call and value.func.id == SETTING_FUNCTION


def _same(a, b) -> bool:
    return type(a) is type(b) and a == b


# -----------------------------
# 5. REACHABILITY
# -----------------------------


def _import_name(alias) -> str:
    return alias.asname or alias.name.split(".")[0]


class Uses:
    """Names, attribute names and strings used by live code."""

    def __init__(self):
        self.names, self.attrs = set(), set()

    def scan(self, node) -> None:
        for n in walk(node):
            if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Store):
                self.names.add(n.id)
            elif isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name):
                self.names.add(n.target.id)  # (`x += 1` reads x)
            elif isinstance(n, (ast.Global, ast.Nonlocal)):
                self.names.update(n.names)  # (its stores are the module's binding's)
            elif isinstance(n, ast.Attribute):
                self.attrs.add(n.attr)
            elif isinstance(n, ast.Constant) and isinstance(n.value, str) and len(n.value) < 80:
                self.attrs.add(n.value)
                self.names.add(n.value)  # (a name looked up by its string)


def _member_name(stmt) -> str | None:
    """A method's name, or a plain class attribute's (`name = ...`: a property, a constant)."""
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return stmt.name
    plain = isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
    return stmt.targets[0].id if plain and isinstance(stmt.targets[0], ast.Name) else None


def _method_live(member, uses: Uses, inherited: frozenset) -> bool:
    name = _member_name(member)
    return (
        (name.startswith("__") and name.endswith("__"))
        or name in PROTOCOL_METHODS
        or name in inherited
        or (name in uses.attrs)
    )


def _scan_class_shell(cls, uses: Uses, inherited: frozenset) -> list:
    """Scan what a live class always keeps; return its methods and plain class attributes, each
    with the names its library ancestors define and the names its body reads in its own scope
    (`DOUBLE = SCALE * 2`: fold.class_scope_reads), to be kept when its name is used or is one."""
    for part in (*cls.bases, *cls.keywords, *cls.decorator_list):
        uses.scan(part)
    members, read_here = [], inherited | class_scope_reads(cls)
    for stmt in cls.body:
        if _member_name(stmt) is not None:
            members.append((stmt, read_here))
        else:
            uses.scan(stmt)
    return members


def _is_import_block(stmt) -> bool:
    return isinstance(stmt, ast.Try) and all(
        isinstance(s, (ast.Import, ast.ImportFrom)) for s in stmt.body
    )


def prune_unreachable(tree: ast.Module, inherited: dict | None = None) -> None:
    """Definitions, methods and imports no live code uses go (to a fixpoint); a method whose
    name a library ancestor of its class defines (`inherited`: Settings.inherited) stays."""
    inherited = inherited or {}
    uses = Uses()
    defs: dict[str, list] = {}
    for stmt in tree.body:
        names = bound_names(stmt)
        if names and _registers(stmt):
            uses.names.update(names)  # (kept: defining it does something)
        if names:
            for name in names:
                defs.setdefault(name, []).append(stmt)
        elif not isinstance(stmt, (ast.Import, ast.ImportFrom)) and not _is_import_block(stmt):
            uses.scan(stmt)  # a root: the __main__ block, ...
        elif _is_import_block(stmt):
            for handler in stmt.handlers:
                uses.scan(handler)
    done, pending, live_methods = set(), [], set()
    while True:
        progress = False
        for name in list(uses.names):
            for stmt in defs.get(name, ()):
                if id(stmt) in done:
                    continue
                done.add(id(stmt))
                progress = True
                if isinstance(stmt, ast.ClassDef):
                    own = inherited.get(stmt.name, frozenset())
                    pending += _scan_class_shell(stmt, uses, own)
                else:
                    uses.scan(stmt)
        for fn, own in pending:
            if id(fn) not in live_methods and _method_live(fn, uses, own):
                live_methods.add(id(fn))
                uses.scan(fn)
                progress = True
        if not progress:
            break
    body = []
    for stmt in tree.body:
        names = bound_names(stmt)
        if names and id(stmt) not in done:
            continue
        if isinstance(stmt, ast.ClassDef):
            stmt.body = [
                s for s in stmt.body if _member_name(s) is None or id(s) in live_methods
            ] or [ast.Pass()]  # fmt: skip
        if isinstance(stmt, (ast.Import, ast.ImportFrom)) and not _prune_import(stmt, uses):
            continue
        if _is_import_block(stmt):
            stmt.body = [s for s in stmt.body if _prune_import(s, uses)]
            if not stmt.body:
                continue
        body.append(stmt)
    tree.body = body


# Decorators whose only effect is on what they decorate (any other may register it somewhere:
# atexit.register, a plugin table), called or not
PURE_DECORATORS = frozenset(
    {"dataclasses.dataclass", "dataclass", "contextlib.contextmanager", "torch.no_grad",
     "functools.cache", "functools.lru_cache", "functools.wraps"}
)  # fmt: skip


def _registers(stmt) -> bool:
    """Whether defining `stmt` may do more than bind its name: a decorator not in
    PURE_DECORATORS."""
    decorators = getattr(stmt, "decorator_list", [])
    names = [ast.unparse(d.func if isinstance(d, ast.Call) else d) for d in decorators]
    return any(name not in PURE_DECORATORS for name in names)


def _prune_import(stmt, uses: Uses) -> bool:
    if isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__":
        return True
    if any(a.name == "*" for a in stmt.names):
        return True  # (which names it binds is not written here)
    stmt.names = [a for a in stmt.names if _import_name(a) in uses.names]
    return bool(stmt.names)


# -----------------------------
# THE PIPELINE
# -----------------------------


def _literal_dicts(tree: ast.Module) -> dict:
    """Module names bound once (bound_once: no other binding anywhere) to a dict literal and never
    stored into: foldable lookups."""
    once = bound_once(tree)
    out = {}
    for stmt in tree.body:
        if (
            isinstance(stmt, ast.Assign)
            and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name)
            and isinstance(stmt.value, ast.Dict)
            and stmt.targets[0].id in once
        ):
            out[stmt.targets[0].id] = stmt.value
    for n in walk(tree):  # d[k] = ..., d[k][j] = ..., del d[k], d[k].update(...): no constant
        stored = isinstance(n, ast.Subscript) and not isinstance(n.ctx, ast.Load)
        if stored or (isinstance(n, ast.Attribute) and n.attr in MUTATING_METHODS):
            base = n.value
            while isinstance(base, ast.Subscript):
                base = base.value
            if isinstance(base, ast.Name):
                out.pop(base.id, None)
    return out


MUTATING_METHODS = frozenset(
    {"update", "pop", "setdefault", "clear", "popitem", "__setitem__", "__delitem__", "append",
     "extend", "insert", "remove", "add", "discard", "sort", "reverse", "__ior__"}
)  # fmt: skip


def _inline_file_constants(tree: ast.Module, constants: dict) -> None:
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            target = stmt.targets[0]
            if isinstance(target, ast.Name) and target.id in constants:
                stmt.value = node_of(constants[target.id])


def _future_annotations(tree: ast.Module) -> bool:
    return any(
        isinstance(s, ast.ImportFrom)
        and s.module == "__future__"
        and any(a.name == "annotations" for a in s.names)
        for s in tree.body
    )


def _strip_annotations(tree) -> None:
    """Function annotations are never evaluated (`from __future__ import annotations`)."""
    for fn in scopes(tree):
        fn.returns = None
        for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs):
            a.annotation = None
        for a in (fn.args.vararg, fn.args.kwarg):
            if a is not None:
                a.annotation = None


def specialized_help(settings: Settings) -> str:
    free = " ".join(f"{name.upper()}=..." for name in settings.free)
    preset = settings.values.get("preset")
    what = f"PRESET={preset}'s settings" if preset else "one run's settings"
    return (
        f"usage: [{free}] torchrun --standalone --nproc_per_node=N train_gpt.py\n"
        f"train_gpt.py specialised to {what}; the readable train_gpt.py it was made from (its "
        "docstring says which) takes other values (its --help)"
    )


def _rewrite_own_functions(tree: ast.Module, settings: Settings) -> None:
    """The functions whose answer is the script's own: its --help (HELP_FUNCTION), which
    variables it takes (SETTABLE_FUNCTION), its code's bytes (CODE_BYTES_FUNCTION)."""
    for stmt in tree.body:
        if isinstance(stmt, ast.FunctionDef) and stmt.name == HELP_FUNCTION:
            stmt.body = [ast.Return(ast.Constant(specialized_help(settings)))]
        if isinstance(stmt, ast.FunctionDef) and stmt.name == SETTABLE_FUNCTION:
            name = stmt.args.args[0].arg  # (calls on a constant name fold: ConfigReads)
            stmt.body = ast.parse(f"return {name}.lower() in {tuple(settings.free)!r}").body
        if isinstance(stmt, ast.FunctionDef) and stmt.name == CODE_BYTES_FUNCTION:
            # a placeholder that does not fold: readable_specialized writes the count in
            code = stmt.args.args[0].arg
            stmt.body = ast.parse(f"return len({code}.encode('utf-8'))").body


def folding_passes(settings: Settings, shadowed: set) -> dict:
    """The passes run to a fixpoint once the settings are constants, by the name
    benchmarks/RESULTS.md's table of passes gives each: each takes the tree and returns it."""

    def in_place(fn):
        def run(tree):
            fn(tree)
            return tree

        return run

    return {
        "constant expressions": lambda t: Fold(
            _literal_dicts(t), shadowed, settings.file_calls, bound_once(t)
        ).visit(t),
        "rows of tables": in_place(lambda t: table_rows(t, _literal_dicts(t))),
        "dead branches and code": in_place(FoldBodies().visit),
        "calls of constant functions": lambda t: InlineConstantCalls(constant_functions(t)).visit(
            t
        ),
        "checks that cannot fail": in_place(prune_checks),
        "constant locals": in_place(propagate_locals),
        "local tables": in_place(fold_local_tables),
        "dead locals": in_place(drop_dead_locals),
        "constant arguments": in_place(constant_arguments),
        "defaults no call uses": in_place(unused_defaults),
        "constant attributes": in_place(constant_attributes),
        "known attributes": in_place(known_attributes),
        "idle hooks": in_place(idle_hooks),
        "unreachable definitions": in_place(lambda t: prune_unreachable(t, settings.inherited)),
    }


def specialize_tree(source: str, settings: Settings, skip=frozenset()) -> ast.Module:
    """`source` specialised to `settings` (the module docstring's steps); `skip`: names of
    folding passes left out, to measure what each buys (benchmarks/specialized_size.py)."""
    tree = ast.parse(source)
    check_modelled(tree)
    check_settings_names(tree, settings)
    if _future_annotations(tree):
        _strip_annotations(tree)
    _inline_file_constants(tree, settings.file_constants)
    rewrite_settings_class(tree, settings)
    _rewrite_own_functions(tree, settings)
    if settings.fixed_table is not None:
        _inline_file_constants(tree, {"FIXED_VARIABLES": settings.fixed_table})
    tree = ConfigReads(settings).visit(tree)
    return fold_to_fixpoint(tree, settings, skip)


def fold_to_fixpoint(tree: ast.Module, settings: Settings, skip=frozenset()) -> ast.Module:
    """The folding passes and the pruning (folding_passes, but those in `skip`) until none
    changes the tree."""
    passes = folding_passes(settings, bound_anywhere(tree))
    unknown = set(skip) - set(passes)
    if unknown:
        raise SubmissionError(f"no folding pass named {', '.join(sorted(unknown))}")
    for _ in range(20):
        before = ast.dump(tree)
        for name, run in passes.items():
            if name not in skip:
                tree = run(tree)
        if ast.dump(tree) == before:
            break
    return ast.fix_missing_locations(tree)


def specialize_source(source: str, settings: Settings, skip=frozenset()) -> str:
    """The specialised script's source (readable Python, before minifying)."""
    return ast.unparse(specialize_tree(source, settings, skip)) + "\n"


# The first line of a specialised script's docstring: how `pack` and `check` tell it from the
# readable script (its code is counted as `counted` packs it, not as the record's minifier does)
SPECIALISED_MARK = "specialised by records/golf/specialize.py"
COUNT_SENTINEL = 987_654_321  # a count while the real one is searched for (readable_specialized)


@dataclasses.dataclass
class Origin:
    """What a specialised script's docstring says about where it came from."""

    script: str  # the readable script's name
    sha256: str  # of its bytes
    command: str  # the command that rebuilds the file
    world_size: int


def readable_specialized(source: str, settings: Settings, origin: Origin) -> str:
    """The script a record's runs run: `source` specialised to `settings`, readable (names as
    written, docstrings kept, the comments of what it left as written, formatted by ruff when
    it is installed), opening with a docstring
    that says what it was made from and how to rebuild it.

    Its code-bytes function returns the size of its own packed form (`counted`). That number is
    part of the code it counts, and brotli's output moves by tens of bytes with its digits, so a
    count that equals its own packing rarely exists: the count is the smallest at least its
    packing, and `counted` pads the packed form to it with blank lines (a few bytes)."""
    tree = specialize_tree(source, settings)
    if not any(_counts_code(stmt) for stmt in tree.body):  # (a run that counts its source)
        return formatted(as_written(_with_count(tree, None, settings, origin), source))
    from .pack import minify_source, record_wrap

    # the minified form once, with a number found nowhere else; each count only changes digits
    marked = _with_count(tree, COUNT_SENTINEL, settings, origin)
    minified = minify_source(shortened(without_docstring(marked)).encode(), renamed=True)
    if minified.count(str(COUNT_SENTINEL).encode()) != 1:
        raise SubmissionError("the code-bytes count cannot be placed: report this")

    def packed_size(count: int) -> int:
        return len(record_wrap(minified.replace(str(COUNT_SENTINEL).encode(), str(count).encode())))

    count = smallest_count(packed_size, packed_size(0) - 64)
    text = formatted(as_written(_with_count(tree, count, settings, origin), source))
    if len(counted(text)) != count:  # the shortcut above must be the packing itself
        raise SubmissionError("the packed form's size is not its count: report this")
    return text


def smallest_count(packed_size, first: int, tries: int = 1000) -> int:
    """The smallest count from `first` on that is at least `packed_size` of itself, the counts
    tried in order, a batch at a time on every core (brotli lets go of the GIL): the serial
    search's result, about 100 packings of 0.1 s each on one core."""
    from concurrent.futures import ThreadPoolExecutor

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    batch = 4 * (cores or 1)  # (the cores this process may use, not the host's)
    with ThreadPoolExecutor(max_workers=cores) as pool:
        for start in range(first, first + tries, batch):
            counts = range(start, min(start + batch, first + tries))
            for count, size in zip(counts, pool.map(packed_size, counts), strict=True):
                if size <= count:
                    return count
    raise SubmissionError(f"no code-bytes count in {first}..{first + tries - 1}: report this")


def _counts_code(stmt) -> bool:
    return isinstance(stmt, ast.FunctionDef) and stmt.name == CODE_BYTES_FUNCTION


def as_written(text: str, source: str) -> str:
    """`text` (a specialised tree unparsed) with each statement the specialiser left as it was
    in `source` (a function, a class, a constant, matched by the names it binds, at the same
    depth) in its original lines, the comments right above it included; in a class it changed,
    each member so. The code is the same: only comments and layout come back, and the
    functions' annotations, which `counted` strips as the specialiser did."""
    original = ast.parse(source)
    twins = copy.deepcopy(original)  # as the specialiser left them: without annotations
    if _future_annotations(twins):
        _strip_annotations(twins)
    ours, theirs = text.splitlines(), source.splitlines()
    spans = _kept_spans(ast.parse(text).body, original.body, twins.body)
    for stmt, written in sorted(spans, key=lambda pair: -pair[0].lineno):
        ours[_first_line(stmt, ours) - 1 : stmt.end_lineno] = theirs[
            _first_line(written, theirs) - 1 : written.end_lineno
        ]
    return "\n".join(ours) + "\n"


def _kept_spans(stmts: list, originals: list, twins: list) -> list[tuple]:
    """(statement of ours, its original) for each statement of `stmts` the specialiser left as
    written, looking into the classes it changed."""
    by_key: dict[tuple, list] = {}
    for original, twin in zip(originals, twins, strict=True):
        key = _statement_key(original)
        if key is not None:
            by_key.setdefault(key, []).append((original, twin))
    out = []
    for stmt in stmts:
        pairs = by_key.get(_statement_key(stmt), []) if _statement_key(stmt) else []
        if len(pairs) != 1 or pairs[0][0].col_offset != stmt.col_offset:
            continue
        original, twin = pairs[0]
        if ast.dump(stmt) == ast.dump(twin):
            out.append((stmt, original))
        elif isinstance(stmt, ast.ClassDef) and isinstance(original, ast.ClassDef):
            out += _kept_spans(stmt.body, original.body, twin.body)
    return out


def _statement_key(stmt) -> tuple | None:
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return ("def", stmt.name)
    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
        return ("bind", stmt.target.id)
    names = bound_names(stmt) if isinstance(stmt, ast.Assign) else []
    return ("bind", *names) if names else None


def _first_line(node, lines: list[str]) -> int:
    """The line where `node` starts, its decorators and the comment lines right above included."""
    first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
    while first > 1 and lines[first - 2].strip().startswith("#"):
        first -= 1
    return first


def _with_count(tree: ast.Module, count: int | None, settings: Settings, origin: Origin) -> str:
    tree = copy.deepcopy(tree)
    for stmt in tree.body:
        if _counts_code(stmt):
            stmt.body = [ast.Return(ast.Constant(count))]  # (kept a function: 22 B fewer)
    doc = ast.Expr(ast.Constant(_docstring(settings, origin, count)))
    has_doc = tree.body and isinstance(tree.body[0], ast.Expr) and is_const(tree.body[0].value)
    tree.body[: 1 if has_doc else 0] = [doc]
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n"


def _docstring(settings: Settings, origin: Origin, count: int | None) -> str:
    preset = settings.values.get("preset")
    what = f"PRESET={preset}'s settings" if preset else "the settings below"
    changed = sorted(
        f"{k.upper()}={v}"
        for k, v in settings.frozen.items()
        if k != "preset" and v != settings.defaults.get(k)
    )
    free = ", ".join(name.upper() for name in settings.free)
    lines = [
        f"{origin.script} {SPECIALISED_MARK}, for {what} on {origin.world_size} ranks.",
        "",
        f"Made from {origin.script} by",
        f"    {origin.command}",
        f"({origin.script}'s sha256: {origin.sha256})",
        *textwrap.wrap(
            "in the training repository, which rebuilds this file byte for byte (with the same "
            f"Python, python-minifier, brotli and ruff). Every setting is built in but {free}: "
            "another value of one is refused, and the readable script takes it. "
            + pod_built_in_note(settings),
            width=96,
            break_on_hyphens=False,
        ),
        *textwrap.wrap(
            "Settings that differ from the readable script's defaults: "
            + (" ".join(changed) or "none")
            + ".",
            width=96,
            break_on_hyphens=False,
        ),
        "",
    ]
    if count is None:  # (no GPTQ: the baseline's rule)
        lines.append("Counted code: this file's bytes, as they are (its logs' `Code size`).")
    else:
        lines += [
            f"Counted code: {count} bytes, the size of its packed form, which",
            f"`python records/submission.py pack {origin.script}` writes (minified, its names",
            "shortened, brotli quality 11, base85, an exec wrapper).",
        ]
    lines.append("The logs of its runs embed this file, and a record folder ships it as it is.")
    return "\n".join(lines) + "\n"


def pod_built_in_note(settings: Settings) -> str:
    """What a specialised script says of the pod settings (POD_SETTINGS) it builds in ("" for
    none)."""
    built_in = {
        what: names
        for what, names in POD_SETTINGS.items()
        if all(n in settings.values and n not in settings.free for n in names)
    }
    if not built_in:
        return ""
    what = "; ".join(
        f"{w} ({', '.join(n.upper() for n in names)})" for w, names in built_in.items()
    )
    own = RECORDS_OWN.get(settings.values.get("preset") or "")
    record = f"its record's own {own:,} B" if own else "its record's own"
    return (
        f"Built in, as their code would count more than {record}: {what}. A run that "
        "needs them runs the readable script."
    )


def formatted(text: str) -> str:
    """`text` as ruff formats it at the project's width (100), or as it is without ruff."""
    ruff = shutil.which("ruff") or shutil.which("ruff", path=str(Path(sys.executable).parent))
    if ruff is None:
        return text
    done = subprocess.run(
        [ruff, "format", "--isolated", "--line-length", "100", "-"],
        input=text,
        capture_output=True,
        text=True,
    )
    return done.stdout if done.returncode == 0 else text


# -----------------------------
# ENTRY POINTS
# -----------------------------


def specialize_script(script: Path, env: dict | None = None, values: dict | None = None,
                      world_size: int = 8) -> str:  # fmt: skip
    """The specialised source of `script` for `env` (resolved by its from_env) or for a log's
    `values` (every field)."""
    module = load_module(script)
    if values is None:
        values = resolve_values(module, env or {}, world_size)
    return specialize_source(script.read_text(encoding="utf-8"), settings_for(module, values))


def write_run_script(
    script: Path, out: Path, settings: dict, world_size: int = 8, command: str = ""
) -> str:
    """`specialize`: write the script a record's runs run, `script` specialised to `settings`
    (readable_specialized), to `out`, atomically; returns its text."""
    from .folders import write_bytes_atomic

    try:
        source = script.read_bytes()
    except OSError as exc:
        raise SubmissionError(f"cannot read {script}: {exc.strerror or exc}") from None
    if is_specialised_script(source.decode("utf-8", "replace")):
        raise SubmissionError(f"{script} is already specialised: give the readable train_gpt.py")
    if out.resolve() == script.resolve():
        raise SubmissionError("-o must name a new file, not the script itself")
    module = load_module(script)
    try:
        values = resolve_values(module, settings, world_size)
    except (ValueError, TypeError) as exc:  # the script's own refusal of the settings
        raise SubmissionError(f"{script} refuses these settings: {exc}") from None
    text = run_script_text(script.name, source, module, values, world_size, command)
    compile(text, str(out), "exec")
    out.parent.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(out, text.encode("utf-8"))
    return text


def run_script_text(name: str, source: bytes, module, values: dict, world_size: int = 8,
                    command: str = "", free=None) -> str:  # fmt: skip
    """The text `specialize` writes (readable_specialized) for the readable script `name` whose
    bytes are `source`, loaded as `module`; `free` as settings_for's."""
    origin = Origin(name, hashlib.sha256(source).hexdigest(), command, world_size)
    return readable_specialized(source.decode("utf-8"), settings_for(module, values, free), origin)


def counted(source: str) -> bytes:
    """The record's packed file of a specialised source, its names renamed (parameters and
    attributes too where that is safe: records/golf/shorten.py): what the artifact counts.
    Without its module docstring (the minifier drops it, and its words must not keep a name
    from shortening), so the count depends on the code alone, not on its layout. A script that
    states its count (`readable_specialized`) is padded to it with blank lines."""
    from .pack import record_pack_source

    packed = record_pack_source(shortened(_without_annotations(source)).encode(), renamed=True)
    stated = stated_count(source)
    if stated is None:
        return packed
    if len(packed) > stated:
        raise SubmissionError(
            f"the script says its code counts {stated} bytes, but its packed form has "
            f"{len(packed)}: it was edited after it was specialised; rebuild it with the "
            "command its docstring names"
        )
    return packed + b"\n" * (stated - len(packed))


def _without_annotations(source: str) -> str:
    """`source` without its module docstring and, under `from __future__ import annotations`,
    its functions' annotations (never evaluated): what the specialiser's tree is, whatever
    the layout of the text (as_written keeps some definitions as written, annotated)."""
    tree = ast.parse(without_docstring(source))
    if _future_annotations(tree):
        _strip_annotations(tree)
    return ast.unparse(tree)


def stated_count(source: str) -> int | None:
    """The count a specialised script's code-bytes function returns, if it returns a number."""
    for stmt in ast.parse(source).body:
        if _counts_code(stmt) and len(stmt.body) == 1 and isinstance(stmt.body[0], ast.Return):
            value = stmt.body[0].value
            if isinstance(value, ast.Constant) and type(value.value) is int:
                return value.value
    return None


def without_docstring(source: str) -> str:
    tree = ast.parse(source)
    if ast.get_docstring(tree, clean=False) is not None:
        del tree.body[0]
    return ast.unparse(tree)


def counts_its_code(text: str) -> bool:
    """Whether `text` is a script of ours that counts its own code (it defines the code-bytes
    function, CODE_BYTES_FUNCTION): the readable train_gpt.py or one specialised from it."""
    with contextlib.suppress(SyntaxError, ValueError):
        return any(_counts_code(stmt) for stmt in ast.parse(text).body)
    return False


def is_specialised_script(text: str) -> bool:
    """Whether `text` is a specialised script (`readable_specialized`'s docstring says so)."""
    with contextlib.suppress(SyntaxError, ValueError):
        doc = ast.get_docstring(ast.parse(text), clean=False) or ""
        return SPECIALISED_MARK in doc.split("\n", 1)[0]
    return False


# -----------------------------
# THE TABLE (benchmarks/RESULTS.md)
# -----------------------------


def table(script: Path, presets=("", "pr1855", "pr2014", "pr2135"), say=None) -> str:
    """benchmarks/RESULTS.md's table: each preset's specialised counted code; `say`: progress."""
    from .pack import record_pack_source

    module, source = load_module(script), script.read_bytes()
    readable = record_pack_source(source)
    lines = [
        "| run | specialised counted code (B) | record's own (B) | % of the record's |",
        "|---|---:|---:|---:|",
    ]
    for i, preset in enumerate(presets):
        if say is not None:
            say(f"[{i + 1}/{len(presets)}] specialising to PRESET={preset} ...")
        values = resolve_values(module, {"PRESET": preset} if preset else {})
        # the count of what `specialize` writes: a record's (brotli moves specialize_script's
        # form, which computes its count, by up to about 100 B)
        size = len(counted(run_script_text(script.name, source, module, values)))
        own = RECORDS_OWN.get(preset)
        share = f"{100 * size / own:.1f}%" if own else "-"
        label = f"`PRESET={preset}`" if preset else "baseline (no preset)"
        lines.append(f"| {label} | {size:,} | {f'{own:,}' if own else '-'} | {share} |")
    lines.append(f"| readable script, unspecialised | {len(readable):,} | | |")
    return "\n".join(lines)


def regions(source: str, top: int = 12) -> list[tuple[int, str]]:
    """The module-level definitions of a specialised source that cost the most counted bytes:
    (the counted bytes its removal saves, its name), the largest first; the candidates are the
    2 * `top` largest by their own minified size."""
    from .pack import minify_source

    tree = ast.parse(source)
    whole = len(counted(source))

    def name(stmt) -> str:
        return ", ".join(bound_names(stmt)) or ast.unparse(stmt).split("\n")[0][:40]

    sizes = [
        (len(minify_source(ast.unparse(s).encode(), renamed=True)), i)
        for i, s in enumerate(tree.body)
    ]
    out = []
    for _, i in sorted(sizes, reverse=True)[: 2 * top]:
        rest = ast.Module([s for j, s in enumerate(tree.body) if j != i], [])
        out.append((whole - len(counted(ast.unparse(rest))), name(tree.body[i])))
    return sorted(out, reverse=True)[:top]
