"""Record submissions for the Parameter Golf challenge: specialise, scaffold, validate, test, pack.

None of these tools count toward the artifact; only train_gpt.py does.

    python records/submission.py specialize --preset pr1855 -o specialised/pr1855/train_gpt.py
    python records/submission.py new logs/run_a.txt logs/run_b.txt logs/run_c.txt \\
        --name "My Idea" --author "Ada" --github-id ada
    python records/submission.py check "records/track_10min_16mb/2026-05-01_MyIdea"
    python records/submission.py previous ../parameter-golf/records
    python records/submission.py stats --new records/track_10min_16mb/2026-05-01_MyIdea \\
        --old ../parameter-golf/records/track_10min_16mb/2026-04-27_PreviousRecord
    python records/submission.py pack specialised/pr1855/train_gpt.py -o /tmp/packed.py

specialize  writes the script a record's runs run: train_gpt.py specialised to the run's
       settings, readable, counting its code as its packed form. Its preflight and every seed
       run it; `new` then ships it as the logs embed it.
new    builds records/<track>/YYYY-MM-DD_<Name>/ from train logs: the script that ran, one
       train_seed{SEED}.log per run, submission.json computed from the logs, a README. It
       writes into this repository's records/drafts/ (git-ignored: nothing in git status)
       unless --records-dir or --out says otherwise.
check  says whether the challenge would accept a record folder: FAIL only for what breaks a
       rule (no code, a score no log backs, artifact > 16,000,000 bytes, training or scored
       evaluation over 600 s, a CPU or fewer than 8 GPUs on the 10-minute track, no readable
       submission.json); a WARN, with its fix, otherwise.
previous  prints the folder of the leaderboard row to beat in a clone of the challenge: the
       best claimed val_bpb among its record folders (not drafts, not support folders).
stats  one-sided Welch t-test of per-seed val_loss against the previous record (0.005 nats,
       p < 0.01); reads the same runs as check.
pack   writes the packed form of a script (a specialised one's counted form; else bz2 + base85
       + exec) and checks it.

Submitting a record means a pull request to the challenge repository, openai/parameter-golf
(https://github.com/openai/parameter-golf), that adds the folder under its records/<track>/.
The previous record's folder, for `stats --old`, is in a clone of that repository:
git clone https://github.com/openai/parameter-golf, then parameter-golf/records/<track>/...

Exit codes: 0 = ok (accepted / significant / created and accepted / packed and verified),
1 = rejected / not significant / verification failed, 2 = bad input (usage, unreadable files,
folder exists without --force, scipy missing for stats).

new and check need only the standard library; specialize and pack need python-minifier and
brotli (requirements.txt); stats needs scipy.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .check import check_folder
from .errors import SubmissionError
from .folders import record_folder
from .logs import read_log
from .pack import TINY_RUN_ENV, compressor_sizes, verify_runs, write_packed
from .previous import describe as describe_leaderboard
from .previous import read_leaderboard
from .rules import ALPHA, JSON_NAME, MARGIN_NATS, TRACKS, rules_help
from .scaffold import create_record
from .stats import describe, gather, one_sample_test, report_ttest, require_scipy, welch_test

CHALLENGE_REPO = "https://github.com/openai/parameter-golf"
# new's default --records-dir: in .gitignore, so a draft never shows in this repository's status
DRAFTS = Path(__file__).resolve().parents[1] / "drafts"
PREVIOUS_HINT = (
    f"; the previous record's folder is in a clone of the challenge (git clone {CHALLENGE_REPO}"
    " ../parameter-golf, then --old ../parameter-golf/records/track_10min_16mb/<newest>), or "
    "give its val_loss as --sota VAL_LOSS"
)

# -----------------------------
# COMMANDS
# -----------------------------


def _print_check(folder, findings, quiet: bool) -> bool:
    """Print the findings and the verdict line; True when the folder would be accepted."""
    if not quiet:
        for f in findings:
            print(f.line())
    fails = [f for f in findings if f.status == "FAIL"]
    warns = [f for f in findings if f.status == "WARN"]
    if fails:
        names = ", ".join(dict.fromkeys(f.rule for f in fails))
        print(f"VERDICT rejected: {folder}: {len(fails)} failed ({names}), {len(warns)} warning(s)")
    else:
        passed = len(findings) - len(warns)
        print(f"VERDICT accepted: {folder}: {passed} passed, {len(warns)} warning(s)")
    return not fails


def cmd_new(args) -> int:
    dest = create_record(
        args.logs,
        name=args.name,
        author=args.author,
        github_id=args.github_id,
        blurb=args.blurb,
        date=args.date,
        track=args.track,
        script=args.script,
        seeds=args.seeds,
        hardware=args.hardware,
        pytorch_version=args.pytorch_version,
        records_dir=DRAFTS if args.records_dir is None and args.out is None else args.records_dir,
        out=args.out,
        force=args.force,
    )
    print(f"created {dest}")
    if dest.resolve().is_relative_to(DRAFTS):
        print(f"(in {DRAFTS}, which git ignores; --records-dir ../parameter-golf/records writes "
              f"into your clone of the challenge repository instead)")  # fmt: skip
    print(code_counting(dest))
    print(
        f"to submit: copy {dest.name}/ into records/{TRACKS[args.track]}/ of your clone of "
        f"{CHALLENGE_REPO} and open a pull request there"
    )
    return 0 if _print_check(dest, check_folder(dest), quiet=False) else 1


def code_counting(dest: Path) -> str:
    """How the new folder's code is counted: the logs' own count of the script they embed."""
    sub = json.loads((dest / "submission.json").read_text())
    shipped = (dest / "train_gpt.py").stat().st_size
    logs = [read_log(p) for p in sorted(dest.glob("train_seed*.log"))]
    compressed = sorted({lg.compressed_code_bytes for lg in logs} - {None})
    line = f"code: train_gpt.py is the script the logs embed ({shipped:,} bytes)"
    if compressed:
        return (
            f"{line}; the artifact counts its packed form, {compressed[0]:,} bytes, as the logs' "
            f"`Code size (compressed)` says (bytes_code {sub['bytes_code']:,})"
        )
    return f"{line}; the artifact counts these bytes, as the logs' `Code size` says"


def cmd_check(args) -> int:
    folders = [record_folder(folder, "check") for folder in args.folders]  # all, before any output
    results = [
        _print_check(folder, check_folder(folder, track=args.track), args.quiet)
        for folder in folders
    ]
    return 0 if all(results) else 1


def cmd_previous(args) -> int:
    board = read_leaderboard(Path(args.records_dir), args.track)
    if board.best is None:
        raise SubmissionError(
            f"{board.track_dir}: no record folder (a {JSON_NAME} claiming a val_bpb, and train "
            "logs) on the challenge's branch; pull the clone (git -C ../parameter-golf pull)"
        )
    for line in describe_leaderboard(board):
        print(line, file=sys.stderr)
    print(board.best[0])
    return 0


def _stats_inputs(args) -> bool:
    """True when there is something to test; raises on missing inputs unless systems-only."""
    if args.new and (args.old is not None or args.sota is not None):
        return True
    if args.systems_only:
        return False
    if not args.new:
        raise SubmissionError("give --new values (per-seed val_loss: numbers, logs, folders, JSON)")
    raise SubmissionError("give --old (the previous record's per-seed val_loss)" + PREVIOUS_HINT)


def cmd_stats(args) -> int:
    if args.systems_only:
        print(
            "EXEMPT systems-only: pure systems speed-ups that leave the ML unchanged are exempt "
            "from the significance requirement"
        )
    if not _stats_inputs(args):
        return 0
    require_scipy()  # says how to install scipy before any work
    new, sources = gather(args.new, "--new")
    if args.old is not None:  # both read before anything is printed
        old, old_sources = gather(args.old, "--old", PREVIOUS_HINT)
    print(f"new: {describe(new)}  [{'; '.join(sources)}]")
    results = []
    if args.old is not None:
        print(f"old: {describe(old)}  [{'; '.join(old_sources)}]")
        two = len(old) > 1
        results.append(
            welch_test(new, old, args.margin) if two else one_sample_test(new, old[0], args.margin)
        )
    if args.sota is not None:
        results.append(one_sample_test(new, args.sota, args.margin))
    for res in results:
        print("\n".join(report_ttest(res, args.alpha)))
    ok = all(r.significant(args.alpha) for r in results)
    if args.systems_only and not ok:
        print("EXEMPT significance: not significant, but a systems-only change does not need to be")
    return 0 if ok or args.systems_only else 1


def _parse_env(pairs: list[str]) -> dict[str, str]:
    env = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SubmissionError(f"--env {pair!r} is not KEY=VALUE")
        env[key] = value
    return env


def cmd_specialize(args) -> int:
    from .specialize import RECORDS_OWN, free_settings, stated_count, write_run_script

    settings = _parse_env(args.set) | ({"PRESET": args.preset} if args.preset else {})
    out = Path(args.out or f"specialised/{args.preset or 'baseline'}/train_gpt.py")
    words = [f"--preset {args.preset}"] if args.preset else []
    words += [f"--set {k}={v}" for k, v in _parse_env(args.set).items()]
    words += [f"--nproc-per-node {args.nproc_per_node}", f"-o {out}"]
    command = " ".join(["python records/submission.py specialize", *words])
    text = write_run_script(Path(args.script), out, settings, args.nproc_per_node, command)
    count = stated_count(text)
    counted = f"{count:,} counted bytes (its packed form)" if count else "counted as it is"
    print(f"wrote {out}: {len(text.splitlines()):,} lines, {len(text.encode()):,} bytes, {counted}")
    own = RECORDS_OWN.get(args.preset or "")
    if count and own:
        print(f"{args.preset}'s record counts {own:,}: {count / own:.1%} of it")
    free = ", ".join(name.upper() for name in free_settings(args.preset or ""))
    print(f"it takes {free}; every other setting is built in")
    n = args.nproc_per_node
    print(f"check it on the pod: python tools/preflight.py --script {out} --nproc-per-node {n}")
    print(f"then run each seed: SEED=1337 torchrun --standalone --nproc_per_node={n} {out}")
    return 0


def cmd_pack_specialised(script: Path, out: Path) -> int:
    from .folders import write_bytes_atomic
    from .pack import minify_source, unpack
    from .shorten import shortened
    from .specialize import counted, stated_count, without_docstring

    text = script.read_text(encoding="utf-8")
    packed = counted(text)
    runs = minify_source(shortened(without_docstring(text)).encode(), renamed=True)
    if unpack(packed) != runs:
        raise SubmissionError(f"{out} would not unpack to {script}'s minified code: report this")
    out.parent.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(out, packed)
    print(
        f"packed {script} -> {out}: {len(text.encode()):,} -> {len(packed):,} bytes, the count "
        f"it states ({stated_count(text):,}): minified with its names shortened, brotli, base85"
    )
    print(f"PASS roundtrip: {out} decompresses to {script}'s minified code")
    return 0


def cmd_pack(args) -> int:
    from .specialize import is_specialised_script

    script, out = Path(args.script), Path(args.out)
    if out.resolve() == script.resolve():
        raise SubmissionError("-o must name a new file, not the script itself")
    if script.is_file() and is_specialised_script(script.read_text("utf-8", errors="replace")):
        return cmd_pack_specialised(script, out)
    res = write_packed(script, out, record=args.record)
    print(
        f"packed {script} -> {out}: {res.original:,} -> {res.packed:,} bytes, "
        f"{res.saved:,} code bytes saved"
    )
    sizes = compressor_sizes(script.read_bytes())
    print("payload by compressor: " + "; ".join(f"{k} {v:,}" for k, v in sizes.items()))
    what = f"the minified {script.name}" if args.record else f"{script.name} byte for byte"
    print(f"PASS roundtrip: {out} decompresses to {what}")
    if args.verify_run is None:
        print(
            "SKIP run: the packed file was not run; give --verify-run DATA_PATH --tokenizer "
            "MODEL to run both under torchrun on a tiny CPU config"
        )
        return 0
    if args.tokenizer is None:
        raise SubmissionError("--verify-run needs --tokenizer (the dataset's .model file)")
    env = {
        **TINY_RUN_ENV,
        "DATA_PATH": str(Path(args.verify_run).resolve()),
        "TOKENIZER_PATH": str(Path(args.tokenizer).resolve()),
        "VOCAB_SIZE": str(args.vocab_size),
        **_parse_env(args.env),
    }
    ok = verify_runs(script, out, env, nproc=args.nproc, timeout=args.run_timeout)
    return 0 if ok else 1


# -----------------------------
# PARSER
# -----------------------------


def _add_new(sub) -> None:
    p = sub.add_parser(
        "new",
        help="scaffold a record folder from train logs",
        description="Scaffold records/<track>/YYYY-MM-DD_<Name>/ from one log per seed: our own "
        "logs/<RUN_ID>.txt (which embed the script) or console captures (then pass --script). "
        "Writes train_gpt.py (the exact script that ran, as the logs embed it; its size must "
        "match `Code size:`), train_seed{SEED}.log, submission.json (per-seed results, mean/std, "
        "bytes_code and bytes_total as the logs count them, compliance from the logs) and "
        "README.md, atomically; then runs `check` on it. Exit 0 when the new folder would be "
        "accepted, 1 when not, 2 on bad input.",
    )
    p.add_argument("logs", nargs="+", help="train logs, one per seed")
    p.add_argument("--name", required=True, help="submission name; names the folder too")
    p.add_argument("--author", required=True, help="author's name")
    p.add_argument("--github-id", required=True, help="author's GitHub user name")
    p.add_argument("--blurb", default="", help="one-paragraph description")
    p.add_argument("--date", help="YYYY-MM-DD (default: today)")
    p.add_argument(
        "--track", default="10min_16mb", choices=sorted(TRACKS), help="default %(default)s"
    )
    p.add_argument("--script", help="the train_gpt.py that ran (when no log embeds the source)")
    p.add_argument("--seeds", nargs="+", type=int, help="seeds in log order, for logs without one")
    p.add_argument("--hardware", help="e.g. '8xH100 80GB SXM' (default: from nvidia-smi)")
    p.add_argument("--pytorch-version", help="default: from the logs' `Running PyTorch` line")
    p.add_argument(
        "--records-dir",
        help="records/ folder to create it in (default: this repository's git-ignored "
        "records/drafts/; give your clone's parameter-golf/records to write it there)",
    )
    p.add_argument("--out", help="exact folder to create (overrides --records-dir/track/name)")
    p.add_argument("--force", action="store_true", help="replace the folder if it exists")
    p.set_defaults(func=cmd_new)


def _add_specialize(sub) -> None:
    from .specialize import POD_BUILT_IN, POD_SETTINGS

    pod = "; ".join(
        f"{what}: {', '.join(n.upper() for n in names)}" for what, names in POD_SETTINGS.items()
    )
    built_in = "; ".join(
        f"{preset} builds in {' and '.join(groups)}" for preset, groups in POD_BUILT_IN.items()
    )
    p = sub.add_parser(
        "specialize",
        help="write the script a record's runs run, specialised to their settings",
        description="Write OUT: SCRIPT specialised to one run's settings (a preset, --set's "
        "values, the ranks), readable (names as written, docstrings kept, comments where the code "
        "is as written, formatted by ruff when "
        "it is installed), its docstring saying what it was made from and the command that "
        "rebuilds it. Every setting is built in but SEED, RUN_ID, DATA_PATH, TOKENIZER_PATH and, "
        f"where the record's counted code leaves room for their code, the pod's ({pod}; "
        f"{built_in}); its code counts as its packed form (`pack` writes it), which its "
        "logs' `Code size (compressed)` line says. Run the preflight and every seed with OUT; "
        "`new` then ships it as the logs embed it. Exit 0 when written, 2 on bad input or "
        "settings SCRIPT refuses.",
    )
    p.add_argument("script", nargs="?", default="train_gpt.py", help="default %(default)s")
    p.add_argument("--preset", metavar="NAME", help="PRESET=NAME's settings")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a setting on top of the preset's (repeat): a shape for a smoke test, say",
    )
    p.add_argument(
        "--nproc-per-node",
        type=int,
        default=8,
        metavar="N",
        help="the ranks the runs use (default %(default)s)",
    )
    p.add_argument(
        "-o", "--out", help="default: specialised/<preset, or baseline>/train_gpt.py (git-ignored)"
    )
    p.set_defaults(func=cmd_specialize)


def _add_check(sub) -> None:
    p = sub.add_parser(
        "check",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        help="validate record folders (exit 0 only if accepted)",
        description="Validate record folders against the challenge's rules. Prints one\n"
        "`PASS|WARN|FAIL rule: message[; fix: ...]` line per finding and a VERDICT line per\n"
        "folder. Exit 0 when every folder would be accepted (warnings allowed), 1 otherwise.\n\n"
        + rules_help(),
    )
    p.add_argument("folders", nargs="+", help="record folders")
    p.add_argument("--track", choices=sorted(TRACKS), help="override the track")
    p.add_argument("--quiet", "-q", action="store_true", help="print only the verdict lines")
    p.set_defaults(func=cmd_check)


def _add_stats(sub) -> None:
    p = sub.add_parser(
        "stats",
        usage="%(prog)s --new VALUE|PATH [VALUE|PATH ...]\n"
        + " " * 27
        + "(--old VALUE|PATH [VALUE|PATH ...] | --sota VAL_LOSS) [--margin NATS] [--alpha P]\n"
        "       %(prog)s --systems-only [the options above]",
        help="significance of a new result against the current record",
        description="One-sided Welch t-test (scipy.stats.ttest_ind, equal_var=False) of per-seed "
        "val_loss (nats): H1 mean(new) < mean(old) - margin; or, with --sota (or one --old "
        "value), the one-sample form (scipy.stats.ttest_1samp). Values may be numbers, train "
        "logs, record folders (the runs `check` counts) or submission.json files (seed_results). "
        "The previous record's folder is in a clone of "
        f"{CHALLENGE_REPO} (records/<track>/...). --new and one of --old or --sota are "
        "required, except with --systems-only. Exit 0 when p < alpha (or --systems-only), 1 "
        "when not significant, 2 on bad input or when scipy is missing.",
    )
    p.add_argument("--new", nargs="+", metavar="VALUE|PATH", help="the new per-seed val_loss")
    p.add_argument(
        "--old",
        nargs="+",
        metavar="VALUE|PATH",
        help="the previous record's per-seed val_loss (e.g. its folder in your clone)",
    )
    p.add_argument(
        "--sota", type=float, metavar="VAL_LOSS", help="one SOTA val_loss: the one-sample test"
    )
    p.add_argument(
        "--margin", type=float, metavar="NATS", default=MARGIN_NATS, help="default %(default)s"
    )
    p.add_argument("--alpha", type=float, metavar="P", default=ALPHA, help="default %(default)s")
    p.add_argument(
        "--systems-only",
        action="store_true",
        help="a pure systems speed-up that leaves the ML unchanged: exempt from significance",
    )
    p.set_defaults(func=cmd_stats)


def _add_previous(sub) -> None:
    p = sub.add_parser(
        "previous",
        help="the folder of the leaderboard row to beat (for stats --old)",
        description="Print the folder of the record a new one must beat: among the track's "
        "folders of a clone of the challenge, those on its own branch (origin/HEAD; drafts "
        "written into the clone are not) with a submission.json claiming a val_bpb and train "
        "logs behind it, the best (lowest) claimed val_bpb. What was set aside, and why, goes "
        "to stderr; the folder alone to stdout, for previous=$(...). Exit 0 with a folder, 2 "
        "when there is none.",
    )
    p.add_argument(
        "records_dir",
        nargs="?",
        default="../parameter-golf/records",
        help="your clone's records/ folder (default %(default)s)",
    )
    p.add_argument(
        "--track", choices=sorted(TRACKS), default="10min_16mb", help="default %(default)s"
    )
    p.set_defaults(func=cmd_previous)


def _add_pack(sub) -> None:
    p = sub.add_parser(
        "pack",
        help="write the self-extracting (packed) form of a script",
        description="Write OUT, the packed form of SCRIPT. A script `specialize` wrote: its "
        "counted form (minified with its names shortened, brotli, base85, padded to the count "
        "it states), which the artifact counts; a record ships the readable script, so this "
        "is for checking the count. Otherwise OUT = `import bz2,base64` + "
        '`exec(bz2.decompress(base64.b85decode("...")))` of SCRIPT (--record: the record\'s '
        "form of the whole script, as the readable script counts itself under GPTQ). Checks that "
        "OUT decompresses to SCRIPT byte for byte and prints the bytes saved. With "
        "--verify-run DATA_PATH --tokenizer MODEL, also runs SCRIPT and OUT under torchrun "
        "(--nproc CPU processes, a tiny model) and checks both reach the same final score "
        "line. Exit 0 when packed (and verified), 1 when the runs disagree, 2 on bad input.",
    )
    p.add_argument("script", help="the readable script, e.g. train_gpt.py")
    p.add_argument("-o", "--out", required=True, help="the packed file to write")
    p.add_argument(
        "--record",
        action="store_true",
        help="the frontier record's form: minified (python-minifier), brotli q11, base85",
    )
    p.add_argument("--verify-run", metavar="DATA_PATH", help="dataset folder for the run check")
    p.add_argument("--tokenizer", metavar="MODEL", help="SentencePiece model of that dataset")
    p.add_argument("--vocab-size", type=int, default=1024, help="default %(default)s")
    p.add_argument("--nproc", type=int, default=2, help="torchrun processes (default 2)")
    p.add_argument("--run-timeout", type=float, default=600.0, help="seconds per run")
    p.add_argument(
        "--env", action="append", default=[], metavar="KEY=VALUE", help="a run variable (repeat)"
    )
    p.set_defaults(func=cmd_pack)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="submission.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = "{specialize,new,check,previous,stats,pack}"
    sub = parser.add_subparsers(dest="command", required=True, metavar=commands)
    for add in (_add_specialize, _add_new, _add_check, _add_previous, _add_stats, _add_pack):
        add(sub)
    return parser


PATH_ARGUMENTS = ("logs", "script", "records_dir", "out", "verify_run", "tokenizer")


def _no_empty_paths(args) -> None:
    """'' names the current directory: an unset shell variable, refused rather than followed."""
    for attr in PATH_ARGUMENTS:
        values = getattr(args, attr, None)
        for value in values if isinstance(values, list) else [values]:
            if value is not None and not value.strip():
                what = attr.replace("_", "-")
                raise SubmissionError(f"{args.command} {what} {value!r}: an empty path")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        _no_empty_paths(args)
        return args.func(args)
    except SubmissionError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
