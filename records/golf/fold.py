"""The folding passes of records/golf/specialize.py (its docstring, step 4, says what each does):
constant expressions, tests by their truth, dead branches and code, constant locals, arguments
and attributes, hooks that do nothing. Each works on any module's syntax tree, in place; the
specialiser runs them to a fixpoint once the run's settings are constants.
"""

from __future__ import annotations

import ast
import builtins
import collections
import contextlib
import copy
import math
import operator

PURE_BUILTINS = {"int", "float", "bool", "str", "len", "max", "min", "abs", "round", "repr"}
AGGREGATES = {"all", "any", "sum", "sorted", "tuple"}  # of a comprehension over constants
STR_METHODS = {"startswith", "endswith", "upper", "lower", "strip", "replace", "split"}


# -----------------------------
# CONSTANTS AS NODES
# -----------------------------


# Fields that hold no node a pass looks at: names, numbers and flags, and the contexts and
# operators (a Name's Load, a BinOp's Add), which the passes read through their parent's field
# (`node.ctx`, `node.op`). walk skips them: a third of a tree's nodes are contexts.
LEAF_FIELDS = frozenset(
    {"ctx", "op", "ops", "id", "arg", "attr", "kind", "level", "module", "is_async",
     "conversion", "simple", "type_comment"}
)  # fmt: skip
_CHILD_FIELDS: dict[type, tuple[str, ...]] = {}  # node class -> its fields but LEAF_FIELDS


def walk(node):
    """ast.walk's nodes in ast.walk's order (breadth first) but the contexts and operators
    (LEAF_FIELDS), without its generator per node: the passes walk the tree a few hundred
    times."""
    todo = collections.deque([node])
    while todo:
        node = todo.popleft()
        fields = _CHILD_FIELDS.get(type(node))
        if fields is None:
            fields = tuple(f for f in node._fields if f not in LEAF_FIELDS)
            _CHILD_FIELDS[type(node)] = fields
        for field in fields:
            value = getattr(node, field, None)
            if isinstance(value, ast.AST):
                todo.append(value)
            elif isinstance(value, list):
                todo.extend(item for item in value if isinstance(item, ast.AST))
        yield node


def node_of(value) -> ast.expr:
    if isinstance(value, tuple):
        return ast.Tuple([node_of(v) for v in value], ast.Load())
    if isinstance(value, list):
        return ast.List([node_of(v) for v in value], ast.Load())
    if isinstance(value, dict):
        return ast.Dict([node_of(k) for k in value], [node_of(v) for v in value.values()])
    if _negative(value):  # (not a literal: unparsed bare, `-5 ** y` would mean -(5 ** y))
        return ast.UnaryOp(ast.USub(), ast.Constant(-value))
    return ast.Constant(value)


def _singleton(value) -> bool:
    return value is None or value is Ellipsis or isinstance(value, bool)


def _negative(value) -> bool:
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return number and math.copysign(1, value) < 0


def is_const(node) -> bool:
    return isinstance(node, ast.Constant)


def const_value(node):
    """(True, value) for a constant or a tuple/list/set of constants; (False, None) otherwise."""
    if isinstance(node, ast.Constant):
        return True, node.value
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        items = [const_value(e) for e in node.elts]
        if all(ok for ok, _ in items):
            kind = {ast.Tuple: tuple, ast.List: list, ast.Set: frozenset}[type(node)]
            return True, kind(v for _, v in items)
    if isinstance(node, ast.Dict) and None not in node.keys:
        keys, values = [const_value(k) for k in node.keys], [const_value(v) for v in node.values]
        if all(ok for ok, _ in keys + values):
            return True, {k: v for (_, k), (_, v) in zip(keys, values, strict=True)}
    negative = isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub)
    if negative and is_const(node.operand) and type(node.operand.value) in (int, float):
        return True, -node.operand.value
    return False, None


def literal(value) -> bool:
    """Whether `value` can be written as a Python literal that evaluates back to it."""
    if value is None or isinstance(value, (bool, int, str, bytes)):
        return True
    if isinstance(value, float):
        return not math.isnan(value)
    if isinstance(value, (list, tuple)):
        return all(map(literal, value))
    if isinstance(value, dict):
        return all(literal(k) and literal(v) for k, v in value.items())
    return False


def bound_names(stmt) -> list[str]:
    """The module-level names a definition binds ([] for other statements)."""
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [stmt.name]
    if isinstance(stmt, ast.Assign):
        names = []
        for t in stmt.targets:
            elts = t.elts if isinstance(t, ast.Tuple) else [t]
            if not all(isinstance(e, ast.Name) for e in elts):
                return []
            names += [e.id for e in elts]
        return names
    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value:
        return [stmt.target.id]
    return []


def binding_counts(tree: ast.Module) -> collections.Counter:
    """How many times the module's own scope binds each name, in any form (an assignment, `+=`,
    a loop's or a with's target, an import, a def): a name bound once is the one definition its
    reads can mean (the scopes' bindings: _scope_bound)."""
    counts = collections.Counter()
    for stmt in tree.body:
        counts.update(_names_bound(stmt))
    return counts


def _names_bound(node):
    """Each binding `node` makes in its own scope, a name per binding: its stores, parameters,
    imports, ..., and a nested def's or class's name (not what binds inside it)."""
    for n in [node] if isinstance(node, _SCOPES) else _outside_scopes(node):
        if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load):
            yield n.id
        else:
            yield from _binds_otherwise(n)


def _outside_scopes(node):
    """`node` and what lies under it, but not inside a function, lambda or class it holds (their
    names are bound where they are defined: _binds_otherwise)."""
    yield node
    for child in ast.iter_child_nodes(node):
        if isinstance(child, _SCOPES):
            yield child
        else:
            yield from _outside_scopes(child)


# -----------------------------
# 4. FOLDING
# -----------------------------

_BINOPS = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
    ast.Pow: operator.pow, ast.BitAnd: operator.and_, ast.BitOr: operator.or_,
    ast.BitXor: operator.xor, ast.LShift: operator.lshift, ast.RShift: operator.rshift,
}  # fmt: skip
_CMPOPS = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Gt: operator.gt, ast.GtE: operator.ge, ast.Is: operator.is_, ast.IsNot: operator.is_not,
    ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b,
}  # fmt: skip
_UNOPS = {ast.Not: operator.not_, ast.USub: operator.neg, ast.UAdd: operator.pos,
          ast.Invert: operator.invert}  # fmt: skip


def _small(value) -> bool:
    """A folded value worth writing as a literal (no huge strings or numbers)."""
    if isinstance(value, (str, bytes)):
        return len(value) <= 4096
    if isinstance(value, int) and not isinstance(value, bool):
        return abs(value) < 1 << 64
    return literal(value)


MISSING = object()  # (Fold._entry: the key is not in the dict)


def _reads_only(node) -> bool:
    """An expression that only reads names, attributes and constants (literal tuples, lists and
    dicts of them too), and compares them."""
    if isinstance(node, (ast.Name, ast.Constant)) or const_value(node)[0]:
        return True
    if isinstance(node, ast.Attribute):
        return _reads_only(node.value)
    if isinstance(node, ast.Compare):
        return all(map(_reads_only, [node.left, *node.comparators]))
    if isinstance(node, (ast.BoolOp, ast.UnaryOp)):
        operands = node.values if isinstance(node, ast.BoolOp) else [node.operand]
        return all(map(_reads_only, operands))
    return False


_CLOSED_NODES = (
    ast.Constant, ast.Tuple, ast.List, ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare,
    ast.IfExp, ast.Subscript, ast.Slice, ast.expr_context, ast.operator, ast.unaryop, ast.boolop,
    ast.cmpop,
)  # fmt: skip


def _closed(node, bound: frozenset = frozenset()) -> bool:
    """An expression of constants alone, comprehensions over them and pure builtins included
    (its only names are its comprehensions' variables): evaluable here, as it would be there."""
    if isinstance(node, ast.Name):
        return node.id in bound
    if isinstance(node, (ast.GeneratorExp, ast.ListComp, ast.SetComp)):
        for gen in node.generators:
            if gen.is_async or not _closed(gen.iter, bound):
                return False
            bound |= {n.id for n in walk(gen.target) if isinstance(n, ast.Name)}
            if not all(_closed(test, bound) for test in gen.ifs):
                return False
        return _closed(node.elt, bound)
    if isinstance(node, ast.Call):
        known = isinstance(node.func, ast.Name) and node.func.id in PURE_BUILTINS | AGGREGATES
        return known and not node.keywords and all(_closed(a, bound) for a in node.args)
    return isinstance(node, _CLOSED_NODES) and all(
        _closed(child, bound) for child in ast.iter_child_nodes(node)
    )


def _no_effects(node) -> bool:
    """An expression whose evaluation changes nothing: reads, arithmetic and subscripts of them
    (an operator of a tensor or number computes a new value), f-strings of them."""
    if isinstance(node, (ast.BinOp, ast.Subscript)):
        parts = [node.left, node.right] if isinstance(node, ast.BinOp) else [node.value, node.slice]
        return all(map(_no_effects, parts))
    if isinstance(node, ast.JoinedStr):
        return all(_no_effects(v) for v in node.values)
    if isinstance(node, ast.FormattedValue):
        return _no_effects(node.value) and (
            node.format_spec is None or _no_effects(node.format_spec)
        )
    return _reads_only(node)


def as_test(node):
    """`node` where only its truth counts (if, while, a ternary's or comprehension's test): `x and
    True` is x, and `x and False` is False when x only reads (as `or` with True and False)."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        operand = as_test(node.operand)
        return ast.Constant(not operand.value) if is_const(operand) else node
    ok, value = const_value(node)
    if ok and not is_const(node):  # a literal tuple, list, ...: its truth
        return ast.Constant(bool(value))
    if not isinstance(node, ast.BoolOp):
        return node
    deciding = not isinstance(node.op, ast.And)  # a constant of this truth decides the `and`/`or`
    values = [as_test(v) for v in node.values]
    for i, v in enumerate(values):
        if is_const(v) and bool(v.value) == deciding and all(map(_reads_only, values[:i])):
            return ast.Constant(deciding)
    values = [v for v in values if not (is_const(v) and bool(v.value) != deciding)]
    if not values:
        return ast.Constant(not deciding)
    if len(values) == 1:
        return values[0]
    node.values = values
    return node


class Fold(ast.NodeTransformer):
    """Constant expressions to constants, branches on constants to the branch taken."""

    def __init__(self, literal_dicts: dict, shadowed: set, file_calls: dict, stable=frozenset()):
        self.literal_dicts, self.shadowed, self.file_calls = literal_dicts, shadowed, file_calls
        self.stable = stable  # names a read anywhere means the module's one binding of (bound_once)

    def _result(self, node, fn):
        try:
            value = fn()
        except Exception:
            return node
        if isinstance(value, (frozenset, set)) or not _small(value):
            return node
        return ast.copy_location(node_of(value), node)

    def visit_UnaryOp(self, node):
        self.generic_visit(node)
        known, value = const_value(node.operand)  # (a literal tuple too: `not ()` is True)
        if known:
            return self._result(node, lambda: _UNOPS[type(node.op)](value))
        return node

    def visit_BinOp(self, node):
        self.generic_visit(node)
        (ok_l, left), (ok_r, right) = const_value(node.left), const_value(node.right)
        if isinstance(node.op, ast.Mult) and isinstance(left, str):  # "=" * 100 stays short
            return node
        if ok_l and ok_r and not isinstance(left, list) and not isinstance(right, list):
            return self._result(node, lambda: _BINOPS[type(node.op)](left, right))
        return node

    def visit_BoolOp(self, node):
        self.generic_visit(node)
        keep_on = isinstance(node.op, ast.And)  # And goes on past truthy constants
        values = []
        for i, v in enumerate(node.values):
            last = i == len(node.values) - 1
            known, value = const_value(v)  # (a literal tuple too: `() and x` is ())
            if known and bool(value) == keep_on and not last:
                continue  # `True and x` is x
            values.append(v)
            if known and bool(value) != keep_on:
                break  # `False and x` is False
        if len(values) == 1:
            return values[0]
        node.values = values
        return node

    def visit_Compare(self, node):
        self.generic_visit(node)
        items = [const_value(node.left), *map(const_value, node.comparators)]
        if not all(ok for ok, _ in items):
            return node
        values = [v for _, v in items]
        for op, a, b in zip(node.ops, values, values[1:], strict=False):
            if isinstance(op, (ast.Is, ast.IsNot)) and not (_singleton(a) or _singleton(b)):
                return node  # (equal constants may or may not be one object, as Python compiles)

        def compare():
            return all(
                _CMPOPS[type(op)](a, b)
                for op, a, b in zip(node.ops, values, values[1:], strict=False)
            )

        return self._result(node, compare)

    def visit_If(self, node):
        self.generic_visit(node)
        node.test = as_test(node.test)
        inner = node.orelse[0] if len(node.orelse) == 1 else None
        same = isinstance(inner, ast.If) and ast.dump(inner.test) == ast.dump(node.test)
        if same and _reads_only(node.test):  # `if x: ... elif x: ...`: the elif never runs
            node.orelse = inner.orelse
        return node

    visit_While = visit_If

    def visit_comprehension(self, node):
        self.generic_visit(node)
        node.ifs = [as_test(test) for test in node.ifs]
        return node

    def visit_IfExp(self, node):
        self.generic_visit(node)
        node.test = as_test(node.test)
        if is_const(node.test):
            return node.body if node.test.value else node.orelse
        return node

    def visit_FormattedValue(self, node):
        node.value = self.visit(node.value)  # (a format spec stays a JoinedStr, as it must)
        if node.format_spec is not None:
            for v in node.format_spec.values:
                self.visit(v)
        return node

    def visit_JoinedStr(self, node):
        self.generic_visit(node)
        parts = []
        for v in node.values:
            if isinstance(v, ast.FormattedValue) and is_const(v.value):
                spec = v.format_spec
                spec_ok = spec is None or (
                    isinstance(spec, ast.JoinedStr) and all(map(is_const, spec.values))
                )
                if spec_ok:
                    value = v.value.value
                    conv = {-1: lambda x: x, 115: str, 114: repr, 97: ascii}[v.conversion]
                    text = "".join(c.value for c in spec.values) if spec else ""
                    with contextlib.suppress(Exception):
                        v = ast.Constant(format(conv(value), text))
            if is_const(v) and parts and is_const(parts[-1]):
                parts[-1] = ast.Constant(parts[-1].value + v.value)
            else:
                parts.append(v)
        if all(map(is_const, parts)):
            return ast.copy_location(ast.Constant("".join(p.value for p in parts)), node)
        node.values = parts
        return node

    def visit_Subscript(self, node):
        self.generic_visit(node)
        if not isinstance(node.ctx, ast.Load):
            return node
        ok_v, value = const_value(node.value)
        ok_k, key = const_value(node.slice)
        if ok_v and ok_k and isinstance(value, (str, tuple, dict)):
            return self._result(node, lambda: value[key])
        if ok_k and isinstance(node.value, ast.Name):
            found = self._entry(node.value.id, key)
            return node if found is None or found is MISSING else found
        literal_keys = isinstance(node.value, ast.Dict) and all(map(is_const, node.value.keys))
        if ok_k and literal_keys and all(map(_no_effects, node.value.values)):
            # {"mean": a, "attn": b}["mean"]: a (the other values, computed, were dropped)
            keys = [k.value for k in node.value.keys]
            if keys.count(key) == 1:
                return node.value.values[keys.index(key)]
        return node

    def _entry(self, name: str, key):
        """The value node of `name[key]` in a module literal dict; None if not known, MISSING
        if the dict has no such key. A name as the value is the object it was bound to only if
        nothing binds that name again (a later store, a parameter of the reading function)."""
        entries = self.literal_dicts.get(name)
        if entries is None or not all(map(is_const, entries.keys)):
            return None
        found = [v for k, v in zip(entries.keys, entries.values, strict=True) if k.value == key]
        if not found:
            return MISSING
        value = found[-1]  # (a key written twice: the dict holds the last)
        if isinstance(value, ast.Name) and value.id not in self.stable:
            return None
        return (
            copy.deepcopy(value) if isinstance(value, (ast.Constant, ast.Name, ast.Dict)) else None
        )

    def visit_Call(self, node):
        self.generic_visit(node)
        f = node.func
        if isinstance(f, ast.Name) and f.id in AGGREGATES - self.shadowed and _closed(node):
            code = compile(ast.fix_missing_locations(ast.Expression(node)), "<fold>", "eval")
            names = {n: getattr(builtins, n) for n in PURE_BUILTINS | AGGREGATES}
            return self._result(node, lambda: eval(code, {"__builtins__": names}))
        args = [const_value(a) for a in node.args]
        if node.keywords or not all(ok for ok, _ in args):
            return node
        values = [v for _, v in args]
        literal_get = isinstance(f, ast.Attribute) and f.attr == "get" and 1 <= len(args) <= 2
        if literal_get and isinstance(f.value, ast.Name):  # table.get(key, default)
            found = self._entry(f.value.id, values[0])
            if found is MISSING:
                return node.args[1] if len(args) == 2 else ast.Constant(None)
            return node if found is None else found
        if isinstance(f, ast.Name) and f.id in self.file_calls:  # what presets/ would say
            return self._result(node, lambda: self.file_calls[f.id](*values))
        if isinstance(f, ast.Name) and f.id in PURE_BUILTINS and f.id not in self.shadowed:
            return self._result(node, lambda: getattr(builtins, f.id)(*values))
        if (
            isinstance(f, ast.Attribute)
            and is_const(f.value)
            and isinstance(f.value.value, str)
            and f.attr in STR_METHODS
        ):
            return self._result(node, lambda: getattr(f.value.value, f.attr)(*values))
        return node


def _ends_block(stmt) -> bool:
    """Whether the statements after `stmt` never run: a return, raise, continue or break; an if
    whose branches all end so. Not a with whose body returns: its context manager may swallow an
    exception raised before the return (contextlib.suppress), and the code after it runs."""
    if isinstance(stmt, ast.If):
        return bool(stmt.orelse) and _ends_block(stmt.body[-1]) and _ends_block(stmt.orelse[-1])
    return isinstance(stmt, (ast.Return, ast.Raise, ast.Continue, ast.Break))


def _idle(stmts: list) -> bool:
    return all(isinstance(s, ast.Pass) for s in stmts)


def _overwrites(stmt, before, private=frozenset()) -> bool:
    """`x = b` right after `x = a` (x a name or `name.attribute`), a only reading, b not reading x
    and calling nothing that could (x one of the function's `private` locals, or no call): the
    first store is never seen."""
    if not all(isinstance(s, ast.Assign) and len(s.targets) == 1 for s in (stmt, before)):
        return False
    target = stmt.targets[0]
    plain = isinstance(target, ast.Name) or (
        isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
    )
    same = ast.dump(target, include_attributes=False).replace("Store", "Load")
    seen = isinstance(target, ast.Name) and target.id in private  # (by no call)
    reads = any(
        ast.dump(n) == same or (isinstance(n, ast.Call) and not seen) for n in walk(stmt.value)
    )
    return (
        plain
        and ast.dump(before.targets[0]) == ast.dump(target)
        and _reads_only(before.value)
        and not reads
    )


def fold_body(stmts: list, private=frozenset(), may_drop=lambda dead: True) -> list:
    """Branches on constants to the branch taken; statements after a return or raise dropped;
    `private`: the enclosing function's locals no call can read (_overwrites); `may_drop(dead)`:
    whether code may go (else it stays as written)."""
    out = []
    for i, stmt in enumerate(stmts):
        named = isinstance(stmt, ast.If) and isinstance(stmt.test, ast.NamedExpr)
        if named and is_const(stmt.test.value):  # `if (x := c):` binds x, then decides on c
            out.append(ast.Assign([ast.Name(stmt.test.target.id, ast.Store())], stmt.test.value))
            stmt.test = stmt.test.value
        const_if = isinstance(stmt, ast.If) and is_const(stmt.test)
        if const_if and may_drop(stmt.orelse if stmt.test.value else stmt.body):
            taken = stmt.body if stmt.test.value else stmt.orelse
            out += fold_body(taken, private, may_drop)
        elif (
            isinstance(stmt, ast.While)
            and is_const(stmt.test)
            and not stmt.test.value
            and may_drop(stmt.body)
        ):
            out += fold_body(stmt.orelse, private, may_drop)
        elif isinstance(stmt, ast.Assert) and is_const(stmt.test) and stmt.test.value:
            continue
        elif isinstance(stmt, ast.Expr) and is_const(stmt.value) and out:
            continue  # a literal statement that is not a docstring
        elif isinstance(stmt, ast.If) and _idle(stmt.body + stmt.orelse) and _reads_only(stmt.test):
            continue  # a test that decides nothing
        elif out and _overwrites(stmt, out[-1], private):
            out[-1] = stmt
        else:
            out.append(stmt)
        if out and _ends_block(out[-1]) and may_drop(stmts[i + 1 :]):
            break
    return out


class FoldBodies(ast.NodeVisitor):
    """fold_body on every statement list. Dead code still tells what a function is: a `yield` in
    it makes a generator, an assignment in it makes a name local (read before it: an error, not
    the global). Code whose going would change either stays (_may_drop)."""

    private = frozenset()  # the locals of the function being folded that no call can read
    function = None  # the function being folded (None: a module's or class's body)

    def visit_FunctionDef(self, node):
        outer = self.private, self.function
        self.private, self.function = _private_locals(node), node
        self.generic_visit(node)
        self.private, self.function = outer

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node):
        outer = self.private, self.function
        self.private, self.function = frozenset(), None
        self.generic_visit(node)
        self.private, self.function = outer

    visit_Lambda = visit_ClassDef

    def generic_visit(self, node):
        for field in ("body", "orelse", "finalbody"):
            stmts = getattr(node, field, None)
            if isinstance(stmts, list) and stmts and isinstance(stmts[0], ast.stmt):
                folded = fold_body(stmts, self.private, self._may_drop)
                needed = field == "body" or (field == "finalbody" and not node.handlers)
                setattr(node, field, folded or ([ast.Pass()] if needed else []))
        if isinstance(node, (ast.If, ast.Try)) and not node.body:  # (emptied by another pass)
            node.body = [ast.Pass()]
        super().generic_visit(node)

    def _may_drop(self, dead: list) -> bool:
        """Whether the function stays what it is without `dead`: it still yields if it did, and
        every name it reads elsewhere that `dead` binds is still bound elsewhere."""
        fn = self.function
        if fn is None or not dead:
            return True
        yields, bound, read = _scope_counts([fn.args, *fn.body])
        gone_yields, gone_bound, gone_read = _scope_counts(dead)
        if yields and yields == gone_yields:
            return False
        return not any(
            read[name] > gone_read[name] and bound[name] == count
            for name, count in gone_bound.items()
        )


def _scope_counts(nodes) -> tuple[int, collections.Counter, collections.Counter]:
    """The yields of `nodes` (not in the scopes they hold), the bindings of each name there,
    and the reads of each name anywhere under them (a closure's too)."""
    yields, bound, read = 0, collections.Counter(), collections.Counter()
    for node in nodes:
        outside = [node] if isinstance(node, _SCOPES) else _outside_scopes(node)
        yields += sum(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in outside)
        bound.update(_names_bound(node))
        loads = (
            n.id for n in walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
        )
        read.update(loads)
    return yields, bound, read


def _private_locals(fn) -> frozenset:
    """The names `fn` binds that are neither global/nonlocal nor read by a scope inside it (a
    closure a call could run), nor seen by locals()/vars(): a call cannot read them."""
    if _reads_every_local(fn):
        return frozenset()
    shared = set()
    for n in _outside_scopes(fn):
        if isinstance(n, (ast.Global, ast.Nonlocal)):
            shared.update(n.names)
        elif n is not fn and isinstance(n, _SCOPES):
            shared.update(m.id for m in walk(n) if isinstance(m, ast.Name))
    return frozenset(set(_scope_counts([fn.args, *fn.body])[1]) - shared)


def prune_checks(tree) -> None:
    """`checks = [(broken, NAME, want), ...]` read only as `for broken, ... in checks if broken`:
    the items whose `broken` is a false constant can no longer fail, and go."""
    for fn in walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for stmt in fn.body:
            if not (
                isinstance(stmt, ast.Assign)
                and len(stmt.targets) == 1
                and isinstance(stmt.targets[0], ast.Name)
                and isinstance(stmt.value, ast.List)
                and stmt.value.elts
                and all(isinstance(e, ast.Tuple) and e.elts for e in stmt.value.elts)
            ):
                continue
            name = stmt.targets[0].id
            if _only_filtered_reads(fn, name, stmt):
                stmt.value.elts = [e for e in stmt.value.elts if not _cannot_fail(e)]


def _cannot_fail(check: ast.Tuple) -> bool:
    """A check whose `broken` is a false constant, its other parts computed without effects
    (what a dropped item's message would have called is not called)."""
    broken, *rest = check.elts
    return is_const(broken) and not broken.value and all(map(_no_effects, rest))


def _only_filtered_reads(fn, name: str, assign) -> bool:
    comps = [n for n in walk(fn) if isinstance(n, ast.comprehension)]
    reads = [n for n in walk(fn) if isinstance(n, ast.Name) and n.id == name]
    stores = [n for n in reads if not isinstance(n.ctx, ast.Load)]
    loads = [n for n in reads if isinstance(n.ctx, ast.Load)]
    if len(stores) != 1 or stores[0] is not assign.targets[0] or not loads:
        return False
    for load in loads:
        comp = next((c for c in comps if c.iter is load), None)
        if comp is None or not isinstance(comp.target, ast.Tuple) or not comp.target.elts:
            return False
        first = comp.target.elts[0]
        if not (
            isinstance(first, ast.Name)
            and len(comp.ifs) == 1
            and isinstance(comp.ifs[0], ast.Name)
            and comp.ifs[0].id == first.id
        ):
            return False
    return True


def _immutable(value) -> bool:
    if isinstance(value, tuple):
        return all(map(_immutable, value))
    return not isinstance(value, (list, dict, set, frozenset))


def scopes(tree):
    yield from (n for n in walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))


def constant_returns(tree: ast.Module) -> dict[str, dict[int, ast.expr]]:
    """Module functions, undecorated and the one binding of their name, that always return a
    tuple with a constant at some positions (it ends with such a return, and every return is
    one): {name: {position: constant}}."""
    out, once = {}, bound_once(tree)
    for fn in tree.body:
        plain = isinstance(fn, ast.FunctionDef) and not fn.decorator_list and fn.name in once
        if not plain or not fn.body:
            continue
        last = fn.body[-1]
        if not (isinstance(last, ast.Return) and isinstance(last.value, ast.Tuple)):
            continue
        returns, yields = [], False
        stack = list(fn.body)
        while stack:  # (not into nested functions, lambdas or classes)
            node = stack.pop()
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                continue
            yields |= isinstance(node, (ast.Yield, ast.YieldFrom))
            if isinstance(node, ast.Return):
                returns.append(node.value)
            stack.extend(ast.iter_child_nodes(node))
        size = len(last.value.elts)
        if yields or not all(isinstance(r, ast.Tuple) and len(r.elts) == size for r in returns):
            continue
        fixed = {}
        for i in range(size):
            values = [const_value(r.elts[i]) for r in returns]
            if (
                all(ok and _immutable(v) for ok, v in values)
                and len({repr(v) for _, v in values}) == 1
            ):
                fixed[i] = returns[0].elts[i]
        if fixed:
            out[fn.name] = fixed
    return out


def constant_functions(tree: ast.Module) -> dict[str, tuple[ast.expr, ast.FunctionDef]]:
    """Module functions whose whole body (a docstring aside) is `return <constant>` (a constant,
    or a tuple or list of them), bound once with no other binding of their name anywhere:
    {name: (the constant, the function)}."""
    once, out = bound_once(tree), {}
    for fn in tree.body:
        if isinstance(fn, ast.FunctionDef) and not fn.decorator_list and fn.name in once:
            body = [s for s in fn.body if not (isinstance(s, ast.Expr) and is_const(s.value))]
            if len(body) == 1 and isinstance(body[0], ast.Return):
                value = body[0].value or ast.Constant(None)
                ok, v = const_value(value)
                # (a list of constants too: each call builds a new list, as the literal does)
                fresh_list = isinstance(v, list) and all(map(_immutable, v))
                if ok and (_immutable(v) or fresh_list):
                    out[fn.name] = (value, fn)
    return out


class InlineConstantCalls(ast.NodeTransformer):
    """`f(a, b)` of a constant function, its arguments constants or names bound where they are
    read, that the function's parameters take (else the call raises, as it did): the constant."""

    def __init__(self, constants: dict):
        self.constants = constants

    def visit_Call(self, node):
        self.generic_visit(node)
        f = node.func
        plain = all(
            isinstance(a, ast.Constant) or (isinstance(a, ast.Name) and isinstance(a.ctx, ast.Load))
            for a in [*node.args, *(k.value for k in node.keywords)]
        )
        if isinstance(f, ast.Name) and f.id in self.constants and plain:
            value, fn = self.constants[f.id]
            if _takes(fn.args, node):
                return ast.copy_location(copy.deepcopy(value), node)
        return node


def _takes(args: ast.arguments, call: ast.Call) -> bool:
    """Whether a function of parameters `args` accepts `call`'s arguments (no * or **)."""
    if any(isinstance(a, ast.Starred) for a in call.args) or any(
        k.arg is None for k in call.keywords
    ):
        return False
    positional = [*args.posonlyargs, *args.args]
    if len(call.args) > len(positional) and args.vararg is None:
        return False
    named = {k.arg for k in call.keywords}
    by_keyword = {a.arg for a in [*args.args, *args.kwonlyargs]}
    if not named <= by_keyword and args.kwarg is None:
        return False
    by_position = {a.arg for a in positional[: len(call.args)]}
    if by_position & named:
        return False  # (a parameter given twice)
    filled = by_position | named
    required = positional[: len(positional) - len(args.defaults)]
    required += [a for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is None]
    return all(a.arg in filled for a in required)


def fold_local_tables(tree) -> None:
    """A local bound once to a dict of constants and only looked up (`t[key]`, `t.get(key,
    default)` with constant keys): each lookup becomes its value; the dict, unread, then goes."""
    for fn in scopes(tree):
        stores: dict[str, list] = {}
        for n in walk(fn):  # (a nested scope's binding of the name too: its reads are unknown)
            if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load):
                stores.setdefault(n.id, []).append(n)
            for name in _binds_otherwise(n):
                stores.setdefault(name, []).extend([n, n])
        tables = {}
        for stmt in _outside_scopes(fn):
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
                target = stmt.targets[0]
                ok, value = const_value(stmt.value)
                plain = ok and isinstance(value, dict) and _immutable(tuple(value.values()))
                if isinstance(target, ast.Name) and plain:  # (a list value may be appended to)
                    tables[target.id] = value
        lookups = {id(n.value) for n in walk(fn)
                   if isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Load)}  # fmt: skip
        lookups |= {id(n.value) for n in walk(fn) if isinstance(n, ast.Attribute)
                    and n.attr == "get"}  # fmt: skip
        other = {n.id for n in walk(fn) if isinstance(n, ast.Name)
                 and isinstance(n.ctx, ast.Load) and id(n) not in lookups}  # fmt: skip
        tables = {k: v for k, v in tables.items() if len(stores[k]) == 1 and k not in other}
        if tables:
            _LookUp(tables).visit(fn)


class _LookUp(ast.NodeTransformer):
    """Lookups of the tables (name -> dict of constants) by constant keys; any other read of a
    table (passed on, iterated) leaves it alone."""

    def __init__(self, tables: dict):
        self.tables = tables

    def visit_Subscript(self, node):
        self.generic_visit(node)
        table = self.tables.get(node.value.id) if isinstance(node.value, ast.Name) else None
        found = table and is_const(node.slice) and isinstance(node.ctx, ast.Load)
        if found and node.slice.value in table:  # (a missing key raises, as it did)
            return node_of(table[node.slice.value])
        return node

    def visit_Call(self, node):
        self.generic_visit(node)
        f = node.func
        table = (
            isinstance(f, ast.Attribute)
            and f.attr == "get"
            and isinstance(f.value, ast.Name)
            and f.value.id in self.tables
        )
        constant = not node.keywords and 1 <= len(node.args) <= 2 and all(map(is_const, node.args))
        if table and constant:
            found, key = self.tables[f.value.id], node.args[0].value
            if key in found:
                return node_of(found[key])
            return node.args[1] if len(node.args) == 2 else ast.Constant(None)
        return node


def drop_dead_locals(tree) -> None:
    """A local no code reads, assigned what only reads (alone or in a tuple assignment): the
    assignment, or its part, goes."""
    for fn in scopes(tree):
        if _reads_every_local(fn):
            continue
        loads, declared = set(), set()
        for n in walk(fn):
            if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Store):
                loads.add(n.id)  # (`del x` needs x bound)
            elif isinstance(n, (ast.Global, ast.Nonlocal)):
                declared.update(n.names)
        for stmt in _outside_scopes(fn):  # (a class body's names are its attributes)
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
                _drop_dead_targets(stmt, loads | declared)
        _drop_emptied(fn)


def _drop_dead_targets(stmt: ast.Assign, read: set) -> None:
    target, value = stmt.targets[0], stmt.value

    def dead(t, v) -> bool:
        return isinstance(t, ast.Name) and t.id not in read and _reads_only(v)

    if dead(target, value):
        stmt.targets, stmt.value = [], None
        return
    pairs = isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple)
    if not pairs or len(target.elts) != len(value.elts):
        return
    keep = [i for i, tv in enumerate(zip(target.elts, value.elts, strict=True)) if not dead(*tv)]
    if len(keep) < len(target.elts):
        target.elts = [target.elts[i] for i in keep]
        value.elts = [value.elts[i] for i in keep]
        if len(keep) == 1:
            stmt.targets, stmt.value = [target.elts[0]], value.elts[0]
        elif not keep:
            stmt.targets, stmt.value = [], None


def _drop_emptied(fn) -> None:
    """Assignments emptied by a transform (no value left) go from every body of `fn`."""
    for node in walk(fn):
        for field in ("body", "orelse", "finalbody"):
            stmts = getattr(node, field, None)
            if isinstance(stmts, list) and stmts and isinstance(stmts[0], ast.stmt):
                kept = [s for s in stmts if not (isinstance(s, ast.Assign) and s.value is None)]
                setattr(node, field, kept or ([ast.Pass()] if field == "body" else []))


def propagate_locals(tree) -> None:
    """A local assigned once, to a constant (or to the constant part of what a function always
    returns), with every read after the assignment in its block: its reads become the constant,
    and the assignment goes when it was a constant."""
    returned = constant_returns(tree) if isinstance(tree, ast.Module) else {}
    for fn in scopes(tree):
        if _reads_every_local(fn):
            continue
        stores: dict[str, int] = {}
        declared = set()
        for n in walk(fn):
            if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load):
                stores[n.id] = stores.get(n.id, 0) + 1
            elif isinstance(n, (ast.Global, ast.Nonlocal)):
                declared.update(n.names)
            elif n is not fn:  # (a parameter, an import, a match's capture, a nested def, ...)
                for name in _binds_otherwise(n):
                    stores[name] = stores.get(name, 0) + 2
        once = {name for name, count in stores.items() if count == 1} - declared
        loads = [n for n in walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)]
        found = {}
        for block in _blocks(fn):
            first = _first_reads(block, [n for n in loads if n.id in once])
            for i, stmt in enumerate(block):
                ready = {name for name in once if first.get(name, i + 1) > i}
                if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
                    found |= _constant_bindings(stmt, ready, returned if block is fn.body else {})
        if found:
            _drop_emptied(fn)
            _Inline(found).visit(fn)


def _reads_every_local(fn) -> bool:
    return any(isinstance(n, ast.Name) and n.id in ("locals", "vars") for n in walk(fn))


def _first_reads(block: list, loads: list) -> dict:
    """{name: the index in `block` of the first statement reading it}; -1 for a name also read
    outside the block (no statement of it comes before all its reads)."""
    position = {id(n): i for i, stmt in enumerate(block) for n in walk(stmt)}
    first: dict = {}
    for n in loads:
        i = position.get(id(n), -1)
        first[n.id] = -1 if i < 0 or first.get(n.id, i) < 0 else min(i, first.get(n.id, i))
    return first


def _blocks(fn):
    """Every statement list of `fn` (its body, its branches' and loops' bodies, ...) but a class
    body's (its stores are the class's attributes)."""
    for node in walk(fn):
        if isinstance(node, ast.ClassDef):
            continue
        for field in ("body", "orelse", "finalbody"):
            stmts = getattr(node, field, None)
            if isinstance(stmts, list) and stmts and isinstance(stmts[0], ast.stmt):
                yield stmts


def _constant_bindings(stmt: ast.Assign, ready: set, returned: dict) -> dict:
    """{name: constant} that `stmt` binds for good (names in `ready`); the constants' part of the
    assignment goes (what a call returns stays assigned: the call remains)."""
    target, found = stmt.targets[0], {}
    call = stmt.value
    if isinstance(target, ast.Tuple) and isinstance(call, ast.Call):
        fixed = returned.get(call.func.id, {}) if isinstance(call.func, ast.Name) else {}
        for i, t in enumerate(target.elts):
            if isinstance(t, ast.Starred):
                break  # (the positions after it count from the end)
            if i in fixed and isinstance(t, ast.Name) and t.id in ready:
                found[t.id] = fixed[i]
    pairs = []
    both = isinstance(target, ast.Tuple) and isinstance(stmt.value, ast.Tuple)
    if isinstance(target, ast.Name):
        pairs = [(target, stmt.value, None)]
    elif both and len(target.elts) == len(stmt.value.elts):
        pairs = list(zip(target.elts, stmt.value.elts, range(len(target.elts)), strict=True))
    drop = []
    for t, v, i in pairs:
        ok, value = const_value(v)
        plain = isinstance(v, (ast.Constant, ast.Tuple, ast.UnaryOp))
        if isinstance(t, ast.Name) and t.id in ready and plain and ok and _immutable(value):
            found[t.id] = v
            drop.append(i)
    if drop == [None]:
        stmt.targets, stmt.value = [], None
    elif drop:
        target.elts = [e for i, e in enumerate(target.elts) if i not in drop]
        stmt.value.elts = [e for i, e in enumerate(stmt.value.elts) if i not in drop]
        if len(target.elts) == 1:
            stmt.targets, stmt.value = [target.elts[0]], stmt.value.elts[0]
        elif not target.elts:
            stmt.targets, stmt.value = [], None
    return found


class _Inline(ast.NodeTransformer):
    def __init__(self, found: dict):
        self.found = found

    def visit_Name(self, node):
        if isinstance(node.ctx, ast.Load) and node.id in self.found:
            return copy.deepcopy(self.found[node.id])
        return node


# -----------------------------
# 4b. CONSTANT ARGUMENTS
# -----------------------------


def _only_called(tree: ast.Module) -> dict:
    """Module functions, and classes with their own __init__, that are only ever called by name:
    {name: (the function whose parameters the calls fill, how many it takes first, the calls)}.
    A name bound twice (or anywhere else: bound_once), bound as a parameter anywhere, a base
    class, written in a string (getattr) or decorated is left alone, and so are the classes when
    code builds an instance without naming its class."""
    defs: dict[str, list] = {}
    for stmt in tree.body:
        for name in bound_names(stmt):
            defs.setdefault(name, []).append(stmt)
    calls: dict[str, list] = {}
    for n in walk(tree):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name):
            calls.setdefault(n.func.id, []).append(n)
    called = {id(c.func) for cs in calls.values() for c in cs}
    # (a field's annotation is never evaluated: `from __future__ import annotations`)
    called |= {id(n) for a in walk(tree) if isinstance(a, ast.AnnAssign)
               for n in walk(a.annotation)}  # fmt: skip
    refused = {n.id for n in walk(tree) if isinstance(n, ast.Name) and id(n) not in called}
    refused |= {n.value for n in walk(tree) if is_const(n) and isinstance(n.value, str)}
    for n in walk(tree):
        if isinstance(n, ast.ClassDef):
            refused |= {b.id for b in n.bases if isinstance(b, ast.Name)}
        elif isinstance(n, ast.arg):
            refused.add(n.arg)
    out, once = {}, bound_once(tree)
    anonymous = _built_anonymously(tree)
    for name, stmts in defs.items():
        stmt = stmts[0]
        if len(stmts) != 1 or name in refused or name not in calls or name not in once:
            continue
        if isinstance(stmt, ast.FunctionDef) and _passes_arguments_through(stmt):
            out[name] = (stmt, 0, calls[name])
        elif isinstance(stmt, ast.ClassDef) and not stmt.decorator_list and name not in anonymous:
            init = [s for s in stmt.body if isinstance(s, ast.FunctionDef) and s.name == "__init__"]
            if len(init) == 1 and not init[0].decorator_list:
                out[name] = (init[0], 1, calls[name])  # (self)
    return out


# Decorators whose wrapper calls the function with its own call's arguments
PASS_THROUGH = frozenset(
    {"staticmethod", "classmethod", "property", "contextlib.contextmanager", "torch.no_grad",
     "functools.cache"}
)  # fmt: skip


def _passes_arguments_through(fn) -> bool:
    """Whether a call of `fn`'s name passes its arguments to `fn` as they are: undecorated, or
    decorated by PASS_THROUGH's alone (another decorator's wrapper may call it otherwise)."""
    names = [ast.unparse(d.func if isinstance(d, ast.Call) else d) for d in fn.decorator_list]
    return all(name in PASS_THROUGH for name in names)


def _built_anonymously(tree: ast.Module) -> set[str]:
    """The module's classes whose instances some code makes without naming the class: `cls(...)`
    in one of its class methods (or its ancestors'); every class for `type(x)(...)` or
    `x.__class__(...)`."""
    classes = {n.name: n for n in walk(tree) if isinstance(n, ast.ClassDef)}
    for n in walk(tree):  # (`k = self.__class__` and then `k(...)` too)
        f = n.func if isinstance(n, ast.Call) else None
        of_type = isinstance(f, ast.Call) and getattr(f.func, "id", "") == "type"
        if of_type or (isinstance(n, ast.Attribute) and n.attr == "__class__"):
            return set(classes)
    found = {
        name
        for name, cls in classes.items()
        if any(isinstance(n, ast.Call) and getattr(n.func, "id", "") == "cls" for n in walk(cls))
    }
    while True:  # (a class method a subclass inherits makes the subclass)
        more = {name for name, c in classes.items() if name not in found
                and any(isinstance(b, ast.Name) and b.id in found for b in c.bases)}  # fmt: skip
        if not more:
            return found
        found |= more


def _parameters(fn, skip: int) -> list:
    """(parameter, default or None, index among the positional arguments a call passes, or None
    if keyword-only) of each named parameter after the first `skip`."""
    a = fn.args
    positional = [*a.posonlyargs, *a.args]
    defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    named = [(p, d, i - skip) for i, (p, d) in enumerate(zip(positional, defaults, strict=True))]
    return named[skip:] + [(p, d, None) for p, d in zip(a.kwonlyargs, a.kw_defaults, strict=True)]


def _passed(call: ast.Call, param: ast.arg, default, index):
    """What `call` passes for a parameter: its argument, else the default; MISSING if neither."""
    for k in call.keywords:
        if k.arg == param.arg:
            return k.value
    if index is not None and index < len(call.args):
        return call.args[index]
    return MISSING if default is None else default


def _one_constant(nodes: list):
    """The constant all `nodes` are (one of them), else None."""
    values = [const_value(n) for n in nodes]
    same = len({(type(v), repr(v)) for _, v in values}) == 1
    return nodes[0] if same and all(ok and _immutable(v) for ok, v in values) else None


def constant_arguments(tree: ast.Module) -> None:
    """A parameter that every call of its function passes the same constant (or leaves at that
    default) becomes that constant in the body; one the body never reads, every call passing it
    something pure, goes. Either way it leaves the signature and the calls."""
    for fn, skip, calls in _only_called(tree).values():
        splats = any(isinstance(x, ast.Starred) for c in calls for x in c.args)
        splats |= any(k.arg is None for c in calls for k in c.keywords)
        params = _parameters(fn, skip)
        too_many = any(len(c.args) > sum(i is not None for _, _, i in params) for c in calls)
        if fn.args.vararg or fn.args.kwarg or splats or too_many:
            continue
        body, dropped = ast.Module(fn.body, []), set()
        for param, default, index in params:
            passed = [_passed(c, param, default, index) for c in calls]
            names = [n for n in walk(body) if isinstance(n, ast.Name) and n.id == param.arg]
            # sound only while every read of the name is the parameter: no store, and no nested
            # scope (a lambda's or function's parameter, a def, an import, ...) binding it again
            rebound = any(not isinstance(n.ctx, ast.Load) for n in names)
            rebound |= param.arg in _bound_in(body)
            effects = default is not None and not _no_effects(default)  # (computed at the def)
            if MISSING in passed or rebound or effects:
                continue
            constant = _one_constant(passed)
            if constant is not None:
                _Inline({param.arg: constant}).visit(body)
                dropped.add(param.arg)
            elif not names and all(map(_reads_only, passed)):  # (a call without it does the same)
                dropped.add(param.arg)
        if dropped:
            _drop_parameters(fn, skip, calls, dropped)


def _bound_in(body: ast.AST) -> set[str]:
    """Every name a node under `body` binds other than by a plain store: parameters of nested
    functions and lambdas, defs and classes, imports, except-clause names, global/nonlocal,
    a match's captures."""
    return {name for n in walk(body) for name in _binds_otherwise(n)}


def _binds_otherwise(n: ast.AST) -> list[str]:
    """The names node `n` binds other than as a stored ast.Name."""
    if isinstance(n, ast.arg):
        return [n.arg]
    if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [n.name]
    if isinstance(n, ast.alias):
        return [(n.asname or n.name).split(".")[0]]
    if isinstance(n, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and n.name:
        return [n.name]
    if isinstance(n, ast.MatchMapping) and n.rest:
        return [n.rest]
    if isinstance(n, (ast.Global, ast.Nonlocal)):
        return list(n.names)
    return []


def _drop_parameters(fn, skip: int, calls: list, dropped: set) -> None:
    gone = [i for p, _, i in _parameters(fn, skip) if p.arg in dropped and i is not None]
    for call in calls:
        call.keywords = [k for k in call.keywords if k.arg not in dropped]
        call.args = [x for i, x in enumerate(call.args) if i not in gone]
    kept = [(p, d) for p, d, _ in _parameters(fn, 0) if p.arg not in dropped]
    a = fn.args
    a.posonlyargs = [p for p in a.posonlyargs if p.arg not in dropped]
    a.args = [p for p in a.args if p.arg not in dropped]
    a.defaults = [d for p, d in kept if d is not None and p not in a.kwonlyargs]
    a.kw_defaults = [d for p, d in kept if p in a.kwonlyargs]
    a.kwonlyargs = [p for p in a.kwonlyargs if p.arg not in dropped]


# -----------------------------
# 4c. CONSTANT ATTRIBUTES
# -----------------------------


def _self_attribute(node, owner: str) -> str | None:
    if (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == owner
    ):
        return node.attr
    return None


def _init_constants(init: ast.FunctionDef, ours: set) -> dict:
    """{attribute: (its constant, the statement storing it)} of `self.x = <constant>` statements
    of an __init__'s own body (tuple assignments too), not in a branch, before any statement
    that may return or run code seeing the instance (a call given it; `super().__init__()`
    aside; `ours`: the module classes' method names): every method then reads the constant."""
    me, out = init.args.args[0].arg, {}
    for stmt in init.body:
        if _may_return_or_show(stmt, me, ours):
            break
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1):
            continue
        target, value = stmt.targets[0], stmt.value
        pairs = [(target, value)]
        both = isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple)
        if both and len(target.elts) == len(value.elts):
            pairs = list(zip(target.elts, value.elts, strict=True))
        for t, v in pairs:
            name, (ok, constant) = _self_attribute(t, me), const_value(v)
            if name is not None and ok and _immutable(constant):
                out[name] = (v, stmt)
    return out


def _may_return_or_show(stmt, me: str, ours: set) -> bool:
    """Whether `stmt` may return, or run code of ours that sees instance `me`: a call given `me`
    (`f(self)`), or of a method some module class defines (`self.build()`; not
    `super().__init__(...)`, nor a library's own method: `self.register_buffer(...)`)."""
    for n in _outside_scopes(stmt):
        if isinstance(n, ast.Return):
            return True
        if n is not stmt and isinstance(n, _SCOPES):  # (a closure over the instance)
            if any(isinstance(m, ast.Name) and m.id == me for m in walk(n)):
                return True
            continue
        if not isinstance(n, ast.Call) or is_super_init(n):
            continue
        given = [*n.args, *(k.value for k in n.keywords)]
        if any(_hands_on(a, me) for a in given) or _self_attribute(n.func, me) in ours:
            return True
    return False


def _hands_on(expr, me: str) -> bool:
    """Whether `expr` may be instance `me` itself, or hold it (not only read its attributes)."""
    read = {id(n.value) for n in walk(expr) if isinstance(n, ast.Attribute)}
    return any(isinstance(n, ast.Name) and n.id == me and id(n) not in read for n in walk(expr))


def is_super_init(call: ast.Call) -> bool:
    f = call.func
    return (
        isinstance(f, ast.Attribute)
        and f.attr == "__init__"
        and isinstance(f.value, ast.Call)
        and getattr(f.value.func, "id", "") == "super"
    )


def _instance_methods(tree: ast.Module) -> set[str]:
    """The names of the methods the module's classes define on their instances."""
    return {f.name for c in walk(tree) if isinstance(c, ast.ClassDef) for f, _ in _methods(c)}


def _methods(cls: ast.ClassDef):
    """(method, its instance's name) of each method taking the instance first."""
    for fn in cls.body:
        if not isinstance(fn, ast.FunctionDef) or not fn.args.args:
            continue
        kinds = {d.id for d in fn.decorator_list if isinstance(d, ast.Name)}
        if not kinds & {"staticmethod", "classmethod"}:
            yield fn, fn.args.args[0].arg


def _sets_attributes_by_name(tree: ast.Module) -> bool:
    """Whether code stores or deletes an attribute by a computed name (`setattr(obj, name, v)`,
    but of an imported module's: torch's config), or reaches an instance's attributes as a dict
    (`vars(obj)`, `obj.__dict__`): then no attribute's stores are all in sight."""
    modules = {
        (a.asname or a.name).split(".")[0]
        for stmt in tree.body
        for s in _outside_scopes(stmt)  # (in a `try:` too)
        if isinstance(s, (ast.Import, ast.ImportFrom))
        for a in s.names
    } & bound_once(tree)
    for n in walk(tree):
        if isinstance(n, ast.Attribute) and n.attr == "__dict__":
            return True
        if not (isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.args):
            continue
        if n.func.id == "vars":
            return True
        if n.func.id in ("setattr", "delattr") and len(n.args) >= 2 and not is_const(n.args[1]):
            root = n.args[0]
            while isinstance(root, ast.Attribute):
                root = root.value
            if not (isinstance(root, ast.Name) and root.id in modules):
                return True
    return False


def _attribute_stores(tree: ast.Module) -> collections.Counter:
    """How many statements store or delete each attribute name (`obj.x = ...`, `del obj.x`,
    `setattr(obj, "x", v)`, `delattr(obj, "x")`)."""
    counts = collections.Counter()
    for n in walk(tree):
        if isinstance(n, ast.Attribute) and not isinstance(n.ctx, ast.Load):
            counts[n.attr] += 1
        elif (
            isinstance(n, ast.Call)
            and getattr(n.func, "id", "") in ("setattr", "delattr")
            and len(n.args) >= 2
            and is_const(n.args[1])
        ):
            counts[n.args[1].value] += 1
    return counts


def _inits_skipped(tree: ast.Module) -> set[str]:
    """The module's classes a subclass may build without running their __init__: the subclass
    defines one that does not open with `super().__init__(...)` (its instances then lack what the
    base's __init__ stores, and read the class attributes instead)."""
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    skipped = set()
    for cls in classes.values():
        init = next((f for f, _ in _methods(cls) if f.name == "__init__"), None)
        if init is None or _opens_with_super_init(init):
            continue
        for base in cls.bases:
            if isinstance(base, ast.Name) and base.id in classes:
                skipped |= {base.id, *_module_ancestors(classes[base.id], classes)}
    return skipped


def _opens_with_super_init(init) -> bool:
    body = [s for s in init.body if not (isinstance(s, ast.Expr) and is_const(s.value))]
    first = body[0] if body else None
    call = first.value if isinstance(first, ast.Expr) else None
    return isinstance(call, ast.Call) and is_super_init(call)


def _module_ancestors(cls: ast.ClassDef, classes: dict) -> set[str]:
    out = set()
    for base in cls.bases:
        if isinstance(base, ast.Name) and base.id in classes and base.id not in out:
            out |= {base.id, *_module_ancestors(classes[base.id], classes)}
    return out


def constant_attributes(tree: ast.Module) -> None:
    """`self.x = <constant>` in a module class's __init__ (not in a branch), when no other code
    stores an attribute x: `self.x` in the class's methods becomes the constant, and the store
    goes when nothing else reads an attribute x."""
    if _sets_attributes_by_name(tree):
        return
    stores = _attribute_stores(tree)
    strings = {n.value for n in walk(tree) if is_const(n) and isinstance(n.value, str)}
    skipped = _inits_skipped(tree)
    ours = _instance_methods(tree)
    for cls in (s for s in tree.body if isinstance(s, ast.ClassDef)):
        init = next((f for f, _ in _methods(cls) if f.name == "__init__"), None)
        if init is None or cls.name in skipped:
            continue
        found = {
            name: found for name, found in _init_constants(init, ours).items()
            if stores.get(name) == 1 and name not in strings
        }  # fmt: skip
        if not found:
            continue
        for fn, me in _methods(cls):
            rebound = any(
                (isinstance(n, ast.Name) and n.id == me and not isinstance(n.ctx, ast.Load))
                or (isinstance(n, ast.arg) and n.arg == me and n is not fn.args.args[0])
                for n in walk(fn)
            )
            if not rebound:
                _InlineAttributes(me, {k: v for k, (v, _) in found.items()}).visit(fn)
        loads = {n.attr for n in walk(tree)
                 if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Load)}  # fmt: skip
        for name, (_, stmt) in found.items():
            if name not in loads:
                _drop_store(stmt, init.args.args[0].arg, name)
        init.body = [s for s in init.body if not (isinstance(s, ast.Assign) and s.value is None)]
        init.body = init.body or [ast.Pass()]


def _init_stores(init: ast.FunctionDef, ours: set) -> set[str]:
    """The attributes an __init__'s own body (not a branch) always stores on its instance before
    any code of ours could ask for them or it could return (_may_return_or_show)."""
    me, out = init.args.args[0].arg, set()
    for stmt in init.body:
        if _may_return_or_show(stmt, me, ours):
            break
        if isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                for t in target.elts if isinstance(target, ast.Tuple) else [target]:
                    out.add(_self_attribute(t, me))
    return out - {None}


def known_attributes(tree: ast.Module) -> None:
    """`hasattr(self, "x")` in a class's methods: True when its __init__ always stores x (and
    nothing deletes an x); False when no code stores an x and the string "x" is only hasattr's."""
    if _sets_attributes_by_name(tree):
        return
    deleted = {n.attr for n in walk(tree) if isinstance(n, ast.Attribute)
               and isinstance(n.ctx, ast.Del)}  # fmt: skip
    deleted |= {n.args[1].value for n in walk(tree) if isinstance(n, ast.Call)
                and getattr(n.func, "id", "") == "delattr" and len(n.args) == 2
                and is_const(n.args[1])}  # fmt: skip
    # (any store, setattr or class attribute, method included, gives an instance the name)
    stored = set(_attribute_stores(tree)) | {
        name for c in walk(tree) if isinstance(c, ast.ClassDef)
        for stmt in c.body for name in _names_bound(stmt)
    }  # fmt: skip
    skipped = _inits_skipped(tree)
    strings: dict[str, int] = {}
    for n in walk(tree):
        if is_const(n) and isinstance(n.value, str):
            strings[n.value] = strings.get(n.value, 0) + 1
    ours, methods = (
        {s.name for s in tree.body if isinstance(s, ast.ClassDef)},
        _instance_methods(tree),
    )
    for cls in (s for s in tree.body if isinstance(s, ast.ClassDef)):
        init = next((f for f, _ in _methods(cls) if f.name == "__init__"), None)
        always = set()  # (what __init__ asks, it asks before its stores)
        if init is not None and cls.name not in skipped:
            always = _init_stores(init, methods) - deleted
        # (a base class of a library's, nn.Module, has attributes no code here stores)
        own_bases = all(isinstance(b, ast.Name) and b.id in ours for b in cls.bases)
        for fn, me in _methods(cls):
            for call in walk(fn):
                if not (
                    isinstance(call, ast.Call)
                    and isinstance(call.func, ast.Name)
                    and call.func.id == "hasattr"
                    and len(call.args) == 2
                    and isinstance(call.args[0], ast.Name)
                    and call.args[0].id == me
                    and is_const(call.args[1])
                ):
                    continue
                name = call.args[1].value
                asked = sum(
                    1 for c in walk(tree) if isinstance(c, ast.Call)
                    and isinstance(c.func, ast.Name) and c.func.id == "hasattr"
                    and len(c.args) == 2 and is_const(c.args[1]) and c.args[1].value == name
                )  # fmt: skip
                if name in always and fn is not init:
                    call.func, call.args = ast.Name("bool", ast.Load()), [ast.Constant(True)]
                elif own_bases and name not in stored and strings.get(name) == asked:
                    call.func, call.args = ast.Name("bool", ast.Load()), [ast.Constant(False)]


class _InlineAttributes(ast.NodeTransformer):
    def __init__(self, owner: str, constants: dict):
        self.owner, self.constants = owner, constants

    def visit_Attribute(self, node):
        self.generic_visit(node)
        name = _self_attribute(node, self.owner)
        if isinstance(node.ctx, ast.Load) and name in self.constants:
            return ast.copy_location(copy.deepcopy(self.constants[name]), node)
        return node


def _drop_store(stmt: ast.Assign, owner: str, name: str) -> None:
    target = stmt.targets[0]
    if not isinstance(target, ast.Tuple):
        stmt.value = None  # (the statement goes)
        return
    keep = [i for i, t in enumerate(target.elts) if _self_attribute(t, owner) != name]
    target.elts = [target.elts[i] for i in keep]
    stmt.value.elts = [stmt.value.elts[i] for i in keep]
    if len(keep) == 1:
        stmt.targets, stmt.value = [target.elts[0]], stmt.value.elts[0]
    elif not keep:
        stmt.value = None


# -----------------------------
# 4d. HOOKS THAT DO NOTHING
# -----------------------------

NULL_CONTEXT = "contextlib.nullcontext()"


def _hook_kind(fn: ast.FunctionDef) -> str | None:
    """ "noop" for a method whose body (a docstring aside) is `pass` or a bare return, "context"
    for one returning `contextlib.nullcontext()`, else None."""
    body = [s for s in fn.body if not (isinstance(s, ast.Expr) and is_const(s.value))]
    if fn.decorator_list or len(body) != 1:
        return None
    stmt = body[0]
    if isinstance(stmt, ast.Pass) or (
        isinstance(stmt, ast.Return) and (stmt.value is None or ast.unparse(stmt.value) == "None")
    ):
        return "noop"
    if isinstance(stmt, ast.Return) and ast.unparse(stmt.value) == NULL_CONTEXT:
        return "context"
    return None


def _hook_call(node, me: str, hooks: dict) -> str | None:
    """The kind of hook `node` calls as `me.hook(...)` with arguments that only read."""
    if not (isinstance(node, ast.Call) and _self_attribute(node.func, me) in hooks):
        return None
    if all(map(_reads_only, [*node.args, *(k.value for k in node.keywords)])):
        return hooks[node.func.attr]
    return None


def _without_hooks(stmts: list, me: str, hooks: dict) -> list:
    out = []
    for stmt in stmts:
        if isinstance(stmt, ast.Expr) and _hook_call(stmt.value, me, hooks):
            continue  # a call that does nothing
        if isinstance(stmt, ast.With):
            stmt.items = [
                item for item in stmt.items
                if not (item.optional_vars is None
                        and _hook_call(item.context_expr, me, hooks) == "context")
            ]  # fmt: skip
            if not stmt.items:
                out += _without_hooks(stmt.body, me, hooks)
                continue
        for field in ("body", "orelse", "finalbody"):
            inner = getattr(stmt, field, None)
            if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                setattr(stmt, field, _without_hooks(inner, me, hooks) or [ast.Pass()])
        for handler in getattr(stmt, "handlers", ()):
            handler.body = _without_hooks(handler.body, me, hooks) or [ast.Pass()]
        out.append(stmt)
    return out


def _targets(stmt) -> list:
    if isinstance(stmt, ast.Assign):
        return [e for t in stmt.targets for e in (t.elts if isinstance(t, ast.Tuple) else [t])]
    return [stmt.target] if isinstance(stmt, (ast.AnnAssign, ast.AugAssign)) else []


def idle_hooks(tree: ast.Module) -> None:
    """A method that does nothing (`pass`, a bare return: a hook another tool fills) or only
    returns `contextlib.nullcontext()`, defined once in the module and never reassigned: its
    class's methods no longer call it as a statement or enter it in a `with`."""
    defined: dict[str, int] = {}
    for n in walk(tree):  # (a subclass's `name = other` in its body defines the hook too)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            defined[n.name] = defined.get(n.name, 0) + 1
        elif isinstance(n, ast.ClassDef) and n.bases:
            for name in {t.id for s in n.body for t in _targets(s) if isinstance(t, ast.Name)}:
                defined[name] = defined.get(name, 0) + 1
    if _sets_attributes_by_name(tree):
        return
    classes = {s.name for s in tree.body if isinstance(s, ast.ClassDef)}
    # (`Other.name = ...` on another class of the module's sets that class's attribute only)
    stored = {n.attr for n in walk(tree)
              if isinstance(n, ast.Attribute) and not isinstance(n.ctx, ast.Load)
              and not (isinstance(n.value, ast.Name) and n.value.id in classes)}  # fmt: skip
    strings = {n.value for n in walk(tree) if is_const(n) and isinstance(n.value, str)}
    for cls in (s for s in tree.body if isinstance(s, ast.ClassDef)):
        hooks = {
            fn.name: kind for fn, _ in _methods(cls)
            if (kind := _hook_kind(fn)) and defined[fn.name] == 1
            and fn.name not in stored | strings
        }  # fmt: skip
        for fn, me in _methods(cls) if hooks else ():
            fn.body = _without_hooks(fn.body, me, hooks) or [ast.Pass()]


# -----------------------------
# 4e. ROWS OF TABLES
# -----------------------------


def _frozen_fields(cls: ast.ClassDef) -> list[tuple[str, ast.expr | None]] | None:
    """The fields, in order, of a class whose instances are plain rows: decorated by
    `dataclass(frozen=True)` alone (as `dataclasses.dataclass` or `dataclass`), with no base and a
    body of a docstring and `name: type` fields (a constant default at most); None otherwise.
    Nothing then computes a field (no __post_init__, property or ClassVar) or changes one."""
    if cls.bases or cls.keywords or len(cls.decorator_list) != 1:
        return None
    deco = cls.decorator_list[0]
    name = deco.func if isinstance(deco, ast.Call) else None
    named = isinstance(name, ast.Name) and name.id == "dataclass"
    dotted = (
        isinstance(name, ast.Attribute)
        and name.attr == "dataclass"
        and isinstance(name.value, ast.Name)
        and name.value.id == "dataclasses"
    )
    frozen = [k for k in getattr(deco, "keywords", ()) if k.arg == "frozen"]
    options = getattr(deco, "keywords", None) == frozen and not deco.args
    if not (named or dotted) or not options or not frozen or frozen[0].value.value is not True:
        return None
    fields = []
    for i, stmt in enumerate(cls.body):
        if i == 0 and isinstance(stmt, ast.Expr) and is_const(stmt.value):
            continue  # the docstring
        plain = isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
        if not plain or "Var" in ast.unparse(stmt.annotation):  # (ClassVar, InitVar)
            return None
        if stmt.value is not None and not is_const(stmt.value):
            return None
        fields.append((stmt.target.id, stmt.value))
    return fields


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def bound_once(tree: ast.Module) -> set[str]:
    """The names the module binds once and no function, lambda or class body binds: a read of
    one anywhere is that binding (_Rows' tables and classes, _constructions' builders)."""
    once = {name for name, count in binding_counts(tree).items() if count == 1}
    return once - _scope_bound(tree)


def bound_anywhere(tree: ast.Module) -> set[str]:
    """Every name the module or any function, lambda or class in it binds: a builtin of one of
    these names may not be the builtin where it is read."""
    return set(binding_counts(tree)) | _scope_bound(tree)


def _scope_bound(tree: ast.Module) -> set[str]:
    """Every name some function, lambda or class body binds (conservatively: any store,
    parameter, nested definition or import inside one; _bound_in's and the plain stores), but a
    class body's own members that the class body does not read: a method named like a module
    function hides it from no code but the class body's. The scopes nested in another lie under
    its children, so the outermost ones are read, once each."""
    names = set()
    for scope in _outermost(tree, _SCOPES):
        if not isinstance(scope, ast.ClassDef):
            for child in ast.iter_child_nodes(scope):  # (its own name is bound where defined)
                names |= _bound_by(child)
            continue
        read_here = class_scope_reads(scope)
        for child in ast.iter_child_nodes(scope):
            names |= _bound_by(child) - (set(_names_bound(child)) - read_here)
    return names


def _bound_by(node: ast.AST) -> set[str]:
    """Every name `node` or a node under it binds (_bound_in's and the plain stores)."""
    stores = {
        n.id for n in walk(node) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)
    }
    return _bound_in(node) | stores


def class_scope_reads(cls: ast.ClassDef) -> frozenset:
    """The names a class body reads in its own scope, where a bare name may be a member
    (`DOUBLE = SCALE * 2`, `@span.setter`, a default `n=LIMIT`)."""
    parts = []
    for stmt in cls.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            defaults = [*stmt.args.defaults, *(d for d in stmt.args.kw_defaults if d)]
            parts += [*stmt.decorator_list, *defaults]
        elif isinstance(stmt, ast.ClassDef):
            parts += [*stmt.decorator_list, *stmt.bases, *stmt.keywords]
        else:
            parts.append(stmt)
    return frozenset(
        n.id if isinstance(n, ast.Name) else n.target.id
        for part in parts
        for n in walk(part)
        if (isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load))
        or (isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name))
    )


def _outermost(node: ast.AST, kinds: tuple):
    """The nodes of these kinds under `node` that no other such node holds."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, kinds):
            yield child
        else:
            yield from _outermost(child, kinds)


class _Rows:
    """The module's tables of rows: `TABLE[key].field` of a dict literal `literal_dicts` names
    (bound once, never stored into) whose row for a constant key is a call of a plain-row class
    (_frozen_fields). A field is known when the call passes it (or its default is) a constant or
    a module name that is bound once at module level and nowhere else: then the read is that
    value wherever it is written."""

    def __init__(self, tree: ast.Module, literal_dicts: dict):
        self.once = bound_once(tree)
        self.classes = {
            s.name: fields
            for s in tree.body
            if isinstance(s, ast.ClassDef) and s.name in self.once
            if (fields := _frozen_fields(s)) is not None
        }
        self.tables = {
            name: table
            for name, table in literal_dicts.items()
            if name in self.once and all(map(is_const, table.keys))
        }

    def row(self, node) -> ast.Call | None:
        """The row call `node` (a `TABLE[constant]`) reads, if known."""
        if not (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name)):
            return None
        table = self.tables.get(node.value.id)
        if table is None or not is_const(node.slice):
            return None
        keys = [k.value for k in table.keys]
        if keys.count(node.slice.value) != 1:
            return None
        call = table.values[keys.index(node.slice.value)]
        plain = isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
        if not plain or call.func.id not in self.classes:
            return None
        starred = any(isinstance(a, ast.Starred) for a in call.args)
        if starred or any(k.arg is None for k in call.keywords):
            return None
        return call

    def field(self, call: ast.Call, name: str) -> ast.expr | None:
        """The value of `call`'s field `name`, when it is a constant or a known module name."""
        fields = self.classes[call.func.id]
        names = [f for f, _ in fields]
        if name not in names or len(call.args) > len(names):
            return None
        passed = dict(zip(names, call.args, strict=False))
        passed |= {k.arg: k.value for k in call.keywords}
        value = passed.get(name, fields[names.index(name)][1])
        if is_const(value) or (isinstance(value, ast.Name) and value.id in self.once):
            return copy.deepcopy(value)
        return None


class _ReadFields(ast.NodeTransformer):
    """`TABLE[key].field` (and `row.field` for a local `row` in `locals_`) to the field's value."""

    def __init__(self, rows: _Rows, locals_: dict):
        self.rows, self.locals = rows, locals_

    def visit_Attribute(self, node):
        self.generic_visit(node)
        if not isinstance(node.ctx, ast.Load):
            return node
        call = self.rows.row(node.value)
        if isinstance(node.value, ast.Name) and node.value.id in self.locals:
            call = self.locals[node.value.id]
        value = call and self.rows.field(call, node.attr)
        return node if value is None else ast.copy_location(value, node)


def table_rows(tree: ast.Module, literal_dicts: dict) -> None:
    """A field read of a table's row by a constant key (`QUANTIZERS["gptq"].file`) becomes the
    field's value (_Rows says when that is sound). A local bound once, in its function's own
    body, to such a row (alone or in a tuple assignment) and read only as `local.field` after it
    is replaced so too, and its binding goes: reading a table's row computes nothing."""
    rows = _Rows(tree, literal_dicts)
    if not rows.tables or not rows.classes:
        return
    for fn in scopes(tree):
        found = _row_locals(fn, rows)
        if found:
            _ReadFields(rows, found).visit(fn)
            _drop_row_bindings(fn, found)
    _ReadFields(rows, {}).visit(tree)


def _row_locals(fn, rows: _Rows) -> dict:
    """{name: row call} of the locals of `fn` table_rows may replace."""
    stores: dict[str, int] = {}
    for n in walk(fn):
        if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load):
            stores[n.id] = stores.get(n.id, 0) + 1
        elif isinstance(n, (ast.arg, ast.Global, ast.Nonlocal)):
            for name in [n.arg] if isinstance(n, ast.arg) else n.names:
                stores[name] = stores.get(name, 0) + 2
    candidates = {}  # name: (row call, index of its binding in fn.body)
    for i, stmt in enumerate(fn.body):
        for target, value in _assigned_pairs(stmt):
            call = rows.row(value)
            if isinstance(target, ast.Name) and call is not None and stores[target.id] == 1:
                candidates[target.id] = (call, i)
    position = {id(n): i for i, stmt in enumerate(fn.body) for n in walk(stmt)}
    attributes = {id(n.value): n for n in walk(fn) if isinstance(n, ast.Attribute)}
    for n in walk(fn):
        if not (isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in candidates):
            continue
        call, at = candidates[n.id]
        read = attributes.get(id(n))
        known = read is not None and isinstance(read.ctx, ast.Load) and rows.field(call, read.attr)
        if not known or position[id(n)] <= at:
            del candidates[n.id]
    return {name: call for name, (call, _) in candidates.items()}


def _assigned_pairs(stmt) -> list:
    """(target, value) pairs of a one-target assignment, a tuple of values to a tuple included."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1):
        return []
    target, value = stmt.targets[0], stmt.value
    if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple):
        if len(target.elts) == len(value.elts):
            return list(zip(target.elts, value.elts, strict=True))
        return []
    return [(target, value)]


def _drop_row_bindings(fn, found: dict) -> None:
    """The bindings of the replaced locals go from fn's body (the rest of a tuple stays)."""
    body = []
    for stmt in fn.body:
        pairs = _assigned_pairs(stmt)
        kept = [(t, v) for t, v in pairs if not (isinstance(t, ast.Name) and t.id in found)]
        if pairs and not kept:
            continue
        if len(kept) == 1 and len(pairs) > 1:
            stmt.targets, stmt.value = [kept[0][0]], kept[0][1]
        elif len(kept) < len(pairs):
            stmt.targets[0].elts = [t for t, _ in kept]
            stmt.value.elts = [v for _, v in kept]
        body.append(stmt)
    fn.body = body or [ast.Pass()]


# -----------------------------
# 4f. DEFAULTS NO CALL USES
# -----------------------------


def _init_of(cls: ast.ClassDef) -> ast.FunctionDef | None:
    inits = [s for s in cls.body if isinstance(s, ast.FunctionDef) and s.name == "__init__"]
    return inits[0] if len(inits) == 1 and not inits[0].decorator_list else None


def _forwards(sub: ast.ClassDef, param: str) -> bool:
    """Whether `sub`'s constructor hands a keyword `param` on to its base unchanged: it has no
    __init__, or one that does not name `param` and whose one super() call passes its own
    **kwargs on. (Should that call pass `param` too, a call of `sub` passing it is refused by
    Python: the calls that count are those that leave it out, which keep the default.)"""
    init = _init_of(sub)
    if init is None:
        return not any(isinstance(s, ast.FunctionDef) and s.name == "__init__" for s in sub.body)
    a = init.args
    named = {p.arg for p in [*a.posonlyargs, *a.args, *a.kwonlyargs]}
    if a.kwarg is None or param in named:
        return False
    supers = [
        n
        for n in walk(init)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and isinstance(n.func.value, ast.Call)
        and isinstance(n.func.value.func, ast.Name)
        and n.func.value.func.id == "super"
    ]
    if len(supers) != 1 or supers[0].func.attr != "__init__":
        return False
    splats = [k for k in supers[0].keywords if k.arg is None]
    return len(splats) == 1 and ast.unparse(splats[0].value) == a.kwarg.arg


class _Module:
    """What _constructions asks of the whole module, read once per unused_defaults pass. Its
    drops only take defaults away, so these stay what they were or more than the module now
    holds: a construction they miss is refused, never wrongly taken as every one."""

    def __init__(self, tree: ast.Module):
        self.once = bound_once(tree)
        self.strings = {n.value for n in walk(tree) if is_const(n) and isinstance(n.value, str)}
        self.anonymous = _built_anonymously(tree)


def _constructions(tree: ast.Module, cls: ast.ClassDef, param: str, module: _Module) -> list | None:
    """Every call that builds `cls`: of it, or of a module subclass that forwards `param`
    (_forwards); None when the class or such a subclass is used otherwise (a value, a base of
    another class, a name bound twice or written in a string), so that a call may be unseen."""
    classes = {s.name: s for s in tree.body if isinstance(s, ast.ClassDef)}
    subs = [
        s
        for s in classes.values()
        if any(isinstance(b, ast.Name) and b.id == cls.name for b in s.bases)
    ]
    if any(not _forwards(s, param) for s in subs):
        return None
    builders = {cls.name, *(s.name for s in subs)}
    if any(b not in module.once or b in module.strings | module.anonymous for b in builders):
        return None
    calls, used = [], set()
    for n in walk(tree):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in builders:
            calls.append(n)
            used.add(id(n.func))
    bases = {id(b) for s in subs for b in s.bases}
    for n in walk(tree):
        loaded = isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in builders
        if loaded and id(n) not in used | bases:
            return None
    return calls


def unused_defaults(tree: ast.Module) -> None:
    """A keyword-only parameter of a module class's __init__ that every construction passes by
    name loses its default: no call can use it, so what it names may go (a name the default
    alone kept). A construction is a call of the class or of a subclass that hands the keyword
    on (_constructions); an explicit keyword beside a ** splat still wins, as Python refuses a
    splat that passes it again."""
    module = None  # (read when the first keyword-only default is)
    for cls in [s for s in tree.body if isinstance(s, ast.ClassDef)]:
        init = _init_of(cls)
        if init is None:
            continue
        a = init.args
        for i, (param, default) in enumerate(zip(a.kwonlyargs, a.kw_defaults, strict=True)):
            if default is None or not _no_effects(default):  # (computing it may do something)
                continue
            module = module or _Module(tree)
            calls = _constructions(tree, cls, param.arg, module)
            if calls and all(any(k.arg == param.arg for k in c.keywords) for c in calls):
                a.kw_defaults[i] = None
