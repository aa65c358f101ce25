"""Benchmark: the code a record counts when it ships train_gpt.py specialised to its run's
settings (records/golf/specialize.py), for the baseline and each leaderboard preset, beside the
records' own counted code (their logs' `Code size (compressed)`): benchmarks/RESULTS.md's table.

  python benchmarks/specialized_size.py                   # the table (about 3.5 min)
  python benchmarks/specialized_size.py --regions pr1855  # what costs the most in one preset's
  python benchmarks/specialized_size.py --passes          # what each pass buys (about 20 min)
  python benchmarks/specialized_size.py --pods            # the pod's settings' cost (about 12 min)

Byte counts, the same on every machine with the same python-minifier, brotli and Python's
ast.unparse (no timing).
"""

from __future__ import annotations

import argparse
import inspect
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run as a script: the repo root

from records.golf import fold, shorten  # noqa: E402
from records.golf import specialize as sp  # noqa: E402
from records.golf.pack import record_pack_source  # noqa: E402
from records.golf.specialize import counted, regions, specialize_script, table  # noqa: E402

PASS_PRESETS = ("pr1855", "pr2014", "pr2135")
# The code of each pass (its functions in records/golf/), for its lines in the table; helpers
# several passes share (walk, node_of, ...) are counted in none
PASS_CODE = {
    "constant expressions": [fold.Fold, fold._closed, fold._small, fold.as_test],
    "dead branches and code": [fold.FoldBodies, fold.fold_body, fold._ends_block, fold._idle,
                               fold._overwrites, fold._scope_counts,
                               fold._private_locals],
    "calls of constant functions": [fold.InlineConstantCalls, fold.constant_functions,
                                    fold._takes],
    "checks that cannot fail": [fold.prune_checks, fold._only_filtered_reads],
    "constant locals": [fold.propagate_locals, fold._first_reads, fold._blocks,
                        fold._constant_bindings, fold._Inline, fold.constant_returns],
    "local tables": [fold.fold_local_tables, fold._LookUp],
    "dead locals": [fold.drop_dead_locals, fold._drop_dead_targets, fold._drop_emptied],
    "constant arguments": [fold.constant_arguments, fold._only_called, fold._parameters,
                           fold._passed, fold._one_constant, fold._bound_in,
                           fold._drop_parameters, fold._passes_arguments_through],
    "defaults no call uses": [fold.unused_defaults, fold._init_of, fold._forwards,
                              fold._constructions],
    "constant attributes": [fold.constant_attributes, fold._init_constants, fold._methods,
                            fold._sets_attributes_by_name, fold._InlineAttributes,
                            fold._drop_store, fold._self_attribute, fold._may_return_or_show,
                            fold._hands_on, fold._attribute_stores, fold._inits_skipped,
                            fold._opens_with_super_init, fold._module_ancestors],
    "rows of tables": [fold.table_rows, fold._frozen_fields, fold._scope_bound, fold._Rows,
                       fold._ReadFields, fold._row_locals, fold._assigned_pairs,
                       fold._drop_row_bindings],
    "known attributes": [fold.known_attributes, fold._init_stores],
    "idle hooks": [fold.idle_hooks, fold._hook_kind, fold._hook_call, fold._without_hooks],
    "unreachable definitions": [sp.prune_unreachable, sp.Uses, sp._member_name, sp._method_live,
                                sp._scan_class_shell, sp._prune_import, sp._registers],
    "positional parameters": [shorten.positional_parameters, shorten._functions, shorten._calls,
                              shorten._passed_as_values, shorten._callee, shorten._only_we_call,
                              shorten._make_positional, shorten._bound_by_partials,
                              shorten._bound_on_access, shorten._is_partial],
    "short attributes": [shorten.short_attributes, shorten._on_self, shorten._class_bindings,
                         shorten._class_scope_names, shorten._plain_classes, shorten._fresh_names,
                         shorten._match_attributes, shorten._persists_attributes, shorten._words,
                         shorten._as_list],
}  # fmt: skip
SHORTEN_STEPS = {  # counted() without one of its two renaming steps
    "positional parameters": shorten.short_attributes,
    "short attributes": shorten.positional_parameters,
}


def pass_lines(name: str) -> int:
    return sum(len(inspect.getsourcelines(code)[0]) for code in PASS_CODE[name])


def pass_table(script: Path, say) -> str:
    """Each pass: its lines, and the counted bytes each preset's script gains without it."""
    module = sp.load_module(script)
    source = script.read_text(encoding="utf-8")
    gains: dict[str, list[int]] = {name: [] for name in PASS_CODE}
    for preset in PASS_PRESETS:
        settings = sp.settings_for(module, sp.resolve_values(module, {"PRESET": preset}))
        full = sp.specialize_source(source, settings)
        size = len(counted(full))
        for i, name in enumerate(PASS_CODE):
            say(f"PRESET={preset} [{i + 1}/{len(PASS_CODE)}] without {name} ...")
            if name in SHORTEN_STEPS:
                code = SHORTEN_STEPS[name](sp.without_docstring(full))
                without = len(record_pack_source(code.encode(), renamed=True))
            else:
                without = len(counted(sp.specialize_source(source, settings, skip={name})))
            gains[name].append(without - size)
    head = " | ".join(f"`{p}` (B)" for p in PASS_PRESETS)
    lines = [f"| pass | its lines | {head} |", "|---|---:|" + "---:|" * len(PASS_PRESETS)]
    for name, saved in gains.items():
        cells = " | ".join(f"{b:,}" for b in saved)
        lines.append(f"| {name} | {pass_lines(name)} | {cells} |")
    return "\n".join(lines)


def pod_table(script: Path, say) -> str:
    """Each preset's counted code with the pod's settings (the specialiser's POD_SETTINGS) built
    in, each group free, and all free, beside its record's own; in bold what its script takes
    (POD_BUILT_IN)."""
    module = sp.load_module(script)
    source = script.read_bytes()
    groups = list(sp.POD_SETTINGS)
    choices = [(), *((group,) for group in groups), tuple(groups)]
    head = " | ".join(["all built in", *(f"{g} free" for g in groups), "all free"])
    lines = [f"| run | {head} (B) | record's own (B) |", "|---|" + "---:|" * (len(choices) + 1)]
    for preset in PASS_PRESETS:
        values = sp.resolve_values(module, {"PRESET": preset})
        taken = set(sp.free_settings(preset))
        cells = []
        for i, chosen in enumerate(choices):
            say(f"PRESET={preset} [{i + 1}/{len(choices)}] free: {', '.join(chosen) or 'none'}")
            free = sp.free_with(chosen)
            text = sp.run_script_text(script.name, source, module, values, free=free)
            size = f"{len(counted(text)):,}"
            cells.append(f"**{size}**" if set(free) == taken else size)
        lines.append(f"| `PRESET={preset}` | {' | '.join(cells)} | {sp.RECORDS_OWN[preset]:,} |")
    return "\n".join(lines)


def progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--script", default=str(REPO / "train_gpt.py"), help="default: ours")
    p.add_argument(
        "--regions",
        metavar="PRESET",
        help="the definitions of PRESET's specialised script that cost the most counted bytes "
        "('' for the baseline)",
    )
    p.add_argument(
        "--passes",
        action="store_true",
        help="each folding and renaming pass: its lines and the counted bytes each preset "
        "gains without it",
    )
    p.add_argument(
        "--pods",
        action="store_true",
        help="each preset's counted code with the pod's settings built in or free",
    )
    args = p.parse_args(argv)
    script = Path(args.script)
    if args.pods:
        print(pod_table(script, progress))
        return 0
    if args.passes:
        print(pass_table(script, progress))
        return 0
    if args.regions is None:
        print(table(script, say=progress))
        return 0
    source = specialize_script(script, {"PRESET": args.regions} if args.regions else {})
    print(
        f"PRESET={args.regions}: its source packs to {len(counted(source)):,} B (the written "
        "script's count is within brotli's noise of it, about 100 B); removing one saves:"
    )
    for saved, what in regions(source):
        print(f"{saved:7,} B  {what}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
