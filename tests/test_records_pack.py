"""Packing (records/golf/pack.py, `pack`, `new --pack`): the self-extracting form of a script.

The packed file is `import bz2,base64` + `exec(bz2.decompress(base64.b85decode("...")))`: it must
decompress to the original byte for byte, run like it, and be what `check` and the artifact
size count when a folder ships it. One test runs our train_gpt.py and its packed form under
torchrun on the tiny dataset (`tiny_dataset` in tests/conftest.py); everything else is fast.
"""

from __future__ import annotations

import base64
import bz2
import json
import lzma
import re
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from records.golf import pack as packmod
from records.golf.check import accepted, check_folder
from records.golf.cli import main
from records.golf.pack import pack_source, unpack

REPO = Path(__file__).resolve().parents[1]
BASELINE = (
    REPO / "tests" / "fixtures" / "records" / "track_10min_16mb" / "2026-03-17_Fixture Baseline"
)
HEAD = b'import bz2,base64\nexec(bz2.decompress(base64.b85decode("'
TAIL = b'")))'

# A script big enough for packing to pay, that shows what it runs as.
PROGRAM = b'''"""A program that packing must not change."""
from __future__ import annotations

import sys
from dataclasses import dataclass


@dataclass
class Point:
    x: int
    y: int  # annotations stay strings under the __future__ import


def main() -> None:
    total = sum(Point(i, i * i).y for i in range(100))
    print(__name__, total, sys.argv[1:], Point.__module__)


if __name__ == "__main__":
    main()
''' + b"".join(b"# padding line %d so the file compresses well\n" % i for i in range(60))


def test_pack_source_is_exactly_the_documented_format():
    packed = pack_source(PROGRAM)
    assert packed.startswith(HEAD) and packed.endswith(TAIL)
    assert base64.b85decode(packed[len(HEAD) : -len(TAIL)]) == bz2.compress(PROGRAM, 9)
    assert pack_source(PROGRAM) == packed  # deterministic
    assert unpack(packed) == PROGRAM
    assert len(packed) < len(PROGRAM)


def test_the_readme_documents_the_format_byte_for_byte():
    readme = (REPO / "records" / "README.md").read_text()
    assert HEAD.decode().replace("\n", "\\n") in readme
    assert "bz2.compress(source, 9)" in readme and TAIL.decode() in readme


def test_packed_script_runs_like_the_original(tmp_path):
    original, packed = tmp_path / "original.py", tmp_path / "packed.py"
    original.write_bytes(PROGRAM)
    packed.write_bytes(pack_source(PROGRAM))

    def run(path: Path) -> str:
        res = subprocess.run(
            [sys.executable, str(path), "--flag"], capture_output=True, text=True, timeout=60
        )
        assert res.returncode == 0, res.stderr
        return res.stdout

    assert run(packed) == run(original) == "__main__ 328350 ['--flag'] __main__\n"


def test_unpack_reads_the_forms_merged_records_shipped_without_running_them():
    src = b"raise SystemExit('unpack must never run this')\n"
    lzma_form = (
        b'import lzma as L,base64 as B\nexec(L.decompress(B.b85decode("'
        + base64.b85encode(lzma.compress(src, preset=9))
        + b'")))\n'
    )
    zlib_form = (
        b"import zlib,base64;exec(zlib.decompress(base64.b64decode('"
        + base64.b64encode(zlib.compress(src))
        + b"')).decode())"
    )
    assert unpack(lzma_form) == src and unpack(zlib_form) == src
    assert unpack(b"print(1)\n") is None
    assert unpack(b'import os,base64\nexec(os.decompress(base64.b85decode("VPa")))') is None
    assert unpack(HEAD + b"not base85 at all" + TAIL) is None
    assert unpack(HEAD + base64.b85encode(b"not bz2") + TAIL) is None


def test_packing_our_train_gpt_saves_most_of_its_code_bytes():
    source = (REPO / "train_gpt.py").read_bytes()
    packed = pack_source(source)
    assert unpack(packed) == source
    assert len(packed) < len(source) * 0.45
    compile(packed, "train_gpt.py", "exec")
    sizes = packmod.compressor_sizes(source)
    assert set(sizes) == {"bz2 level 9", "lzma preset 9", "lzma preset 9e", "zlib level 9"}
    assert len(packed) == len(HEAD) + len(TAIL) + len(base64.b85encode(bz2.compress(source, 9)))


def test_pack_cli_writes_the_packed_file_and_prints_the_bytes_saved(tmp_path, capsys):
    script, out = tmp_path / "program.py", tmp_path / "packed" / "program.py"
    script.write_bytes(PROGRAM)
    assert main(["pack", str(script), "-o", str(out)]) == 0
    assert out.read_bytes() == pack_source(PROGRAM)
    lines = capsys.readouterr().out.splitlines()
    saved = len(PROGRAM) - len(pack_source(PROGRAM))
    assert lines[0].endswith("code bytes saved") and f"{saved:,} code bytes saved" in lines[0]
    assert lines[1].startswith("payload by compressor: bz2 level 9 ")
    assert lines[2] == f"PASS roundtrip: {out} decompresses to program.py byte for byte"
    assert lines[3].startswith("SKIP run: the packed file was not run; give --verify-run")


@pytest.mark.parametrize(
    "case, message",
    [
        ("packed", "is already packed"),
        ("same", "-o must name a new file"),
        ("tiny", "packing would grow the script"),
        ("missing", "cannot read"),
    ],
)
def test_pack_cli_refuses_bad_inputs(tmp_path, capsys, case, message):
    script = tmp_path / "program.py"
    script.write_bytes({"packed": pack_source(PROGRAM), "tiny": b"print(1)\n"}.get(case, PROGRAM))
    if case == "missing":
        script.unlink()
    out = script if case == "same" else tmp_path / "out.py"
    assert main(["pack", str(script), "-o", str(out)]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out.py").exists()


def test_run_verification_compares_the_final_score_lines(tmp_path, monkeypatch):
    finals = iter(
        [
            "final_int8_zlib_roundtrip_exact val_loss:6.94735693 val_bpb:4.15790986\n",
            "final_int8_zlib_roundtrip_exact val_loss:6.94735693 val_bpb:4.15790987\n",
        ]
    )

    def fake_torchrun(script, env, nproc, timeout):
        return packmod.RunOutcome(script, 0, next(finals), "")

    monkeypatch.setattr(packmod, "torchrun", fake_torchrun)
    said = []
    ok = packmod.verify_runs(tmp_path / "a.py", tmp_path / "b.py", {}, say=said.append)
    assert not ok
    assert said[-1] == (
        "FAIL run: the original ends on `final_int8_zlib_roundtrip_exact val_loss:6.94735693 "
        "val_bpb:4.15790986` but the packed file on `final_int8_zlib_roundtrip_exact "
        "val_loss:6.94735693 val_bpb:4.15790987`"
    )


def test_packed_train_gpt_reaches_the_same_final_line_under_torchrun(
    tiny_dataset, tmp_path, capsys
):
    out = tmp_path / "train_gpt.py"
    args = ["pack", str(REPO / "train_gpt.py"), "-o", str(out)]
    args += ["--verify-run", str(tiny_dataset.dataset_dir)]
    args += ["--tokenizer", str(tiny_dataset.tokenizer_path)]
    assert main([*args, "--vocab-size", str(tiny_dataset.vocab_size)]) == 0, capsys.readouterr()
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.startswith("PASS run: both reached `final_int8_zlib_roundtrip_exact val_loss:")


# ---------------------------------------------------------------------------------------------
# folders that ship the packed form
# ---------------------------------------------------------------------------------------------
def logs_of(tmp_path: Path, script: bytes) -> list[Path]:
    """The baseline fixture's logs, rewritten as if `script` had run (embedded, Code size)."""
    old = (BASELINE / "train_gpt.py").read_bytes()
    grow = len(script) - len(old)
    out = []
    for log in sorted(BASELINE.glob("train_seed*.log")):
        text = log.read_bytes().replace(old, script)
        text = text.replace(b"Code size: 159 bytes", b"Code size: %d bytes" % len(script))
        for total in (b"15812504", b"15816006", b"15820035"):
            text = text.replace(total + b" bytes", b"%d bytes" % (int(total) + grow))
        (tmp_path / log.name).write_bytes(text)
        out.append(tmp_path / log.name)
    return out


def test_new_ships_the_script_that_ran_never_a_packed_copy(tmp_path, capsys):
    """No folder ships a script that did not produce its logs: `new` has no packing option."""
    logs = logs_of(tmp_path, PROGRAM)
    args = ["new", *map(str, logs), "--name", "Packed", "--author", "A", "--github-id", "a"]
    args += ["--date", "2026-05-05", "--records-dir", str(tmp_path / "records")]
    with pytest.raises(SystemExit):
        main([*args, "--pack"])
    assert main(args) == 0, capsys.readouterr()
    folder = tmp_path / "records" / "track_10min_16mb" / "2026-05-05_Packed"
    assert (folder / "train_gpt.py").read_bytes() == PROGRAM
    assert sorted(p.name for p in folder.glob("*.py")) == ["train_gpt.py"]
    data = json.loads((folder / "submission.json").read_text())
    assert data["bytes_code"] == len(PROGRAM)


def test_artifact_counts_the_packed_script_the_folder_ships(tmp_path):
    """Logged readable: 16,000,100 bytes; shipped packed, it is under the limit."""
    logs = logs_of(tmp_path, PROGRAM)
    for log in logs:
        text = log.read_text().replace(
            f"Total submission size int8+zlib: {15820035 - 159 + len(PROGRAM)} bytes",
            "Total submission size int8+zlib: 16000100 bytes",
        )
        log.write_text(text)
    folder = tmp_path / "track_10min_16mb" / "2026-05-06_Packed"
    folder.mkdir(parents=True)
    for log in logs:
        log.rename(folder / log.name)
    (folder / "README.md").write_text("# Packed\n")
    sub = {"author": "A", "github_id": "a", "name": "P", "date": "2026-05-06", "val_bpb": 1.2244}
    (folder / "submission.json").write_text(json.dumps(sub))
    (folder / "train_gpt.py").write_bytes(PROGRAM)
    assert not accepted(check_folder(folder))  # readable: 16,000,100 bytes
    (folder / "train_gpt.py").write_bytes(pack_source(PROGRAM))
    findings = check_folder(folder)
    assert accepted(findings), [f.line() for f in findings]
    shipped = 16000100 - len(PROGRAM) + len(pack_source(PROGRAM))
    artifact = next(f.message for f in findings if f.rule == "artifact")
    assert artifact.startswith(f"largest artifact {shipped:,} bytes (train_seed2024.log)")


def test_check_accepts_logs_of_a_run_of_the_packed_file(tmp_path):
    """A run of the packed file embeds the packed text and logs its size as `Code size`."""
    packed = pack_source(PROGRAM)
    folder = tmp_path / "track_10min_16mb" / "2026-05-07_Ran_packed"
    folder.mkdir(parents=True)
    for log in logs_of(tmp_path, packed):
        log.rename(folder / log.name)
    (folder / "README.md").write_text("# Ran packed\n")
    sub = {"author": "A", "github_id": "a", "name": "P", "date": "2026-05-07", "val_bpb": 1.2244}
    (folder / "submission.json").write_text(json.dumps({**sub, "bytes_code": len(packed)}))
    (folder / "train_gpt.py").write_bytes(packed)
    findings = check_folder(folder)
    assert accepted(findings) and not [f for f in findings if f.status == "WARN"]


def test_the_pack_sizes_in_records_readme_are_those_of_the_commit_it_names():
    """records/README.md quotes `pack`'s output for train_gpt.py at a named commit: packing that
    commit's script gives exactly those numbers (the script itself changes every week)."""
    readme = (REPO / "records" / "README.md").read_text()
    commit = re.search(r"for `train_gpt\.py` as of commit ([0-9a-f]{7,40})", readme).group(1)
    shown = subprocess.run(
        ["git", "show", f"{commit}:train_gpt.py"], cwd=REPO, capture_output=True, timeout=60
    )
    if shown.returncode != 0:  # a shallow clone without that commit
        pytest.skip(f"commit {commit} is not in this clone's history")
    source = shown.stdout
    packed = pack_source(source)
    sizes = packmod.compressor_sizes(source)
    line = (
        f"packed train_gpt.py -> packed/train_gpt.py: {len(source):,} -> {len(packed):,} bytes, "
        f"{len(source) - len(packed):,} code bytes saved"
    )
    assert line in readme
    assert "payload by compressor: " + "; ".join(f"{k} {v:,}" for k, v in sizes.items()) in readme
    bz2_, lzma9 = sizes["bz2 level 9"], sizes["lzma preset 9"]
    why = f"bz2 is {lzma9 - bz2_:,} payload bytes smaller than lzma and "
    assert why + f"{sizes['zlib level 9'] - bz2_:,} smaller than zlib" in readme.replace("\n", " ")
