"""benchmarks/ttt_schedule.py: TTT's work replayed on the records' documents, ours against the
record's. The documents are rebuilt from `ttp:` lines as the records' logs print them; the
record's batches go to the first free rank; the CLI reports every preset and fails when ours
would take more than the record's."""

from __future__ import annotations

import json

import numpy as np

from benchmarks import ttt_schedule as ts


def ttp_log(total: int, size: int, batches: dict[int, tuple[int, int]], eval_ms: int) -> str:
    count = -(-total // size)
    lines = [f"  ttt_batch_size: {size}", f"ttt_phased: total_docs:{total} prefix_docs:10"]
    lines += [
        f"ttp: b{b}/{count} bl:2.1 bb:1.0 rl:2.1 rb:1.0 dl:{low}-{high} gd:0"
        for b, (low, high) in batches.items()
    ]
    lines.append(f"quantized_ttt_phased val_loss:2.3 val_bpb:1.05 eval_time:{eval_ms}ms")
    return "\n".join(lines) + "\n"


# 200 documents: batches of 64 (4, the last of 8) and of 24 (9, the last of 8)
LOG64 = ttp_log(200, 64, {1: (60, 90), 3: (300, 700), 4: (3000, 9000)}, 500_000)
LOG24 = ttp_log(200, 24, {1: (60, 70), 5: (150, 200), 9: (3000, 9000)}, 570_000)


def test_the_rebuild_puts_each_logged_length_at_its_rank_and_interpolates_between():
    lengths, notes = ts.rebuilt_lengths([LOG64, LOG24])
    assert lengths.size == 200 and np.all(np.diff(lengths) >= 0)
    assert (lengths[0], lengths[63], lengths[128], lengths[191]) == (60, 90, 300, 700)
    assert (lengths[192], lengths[199]) == (3000, 9000)  # batch 9 of 24 and 4 of 64 agree here
    assert (lengths[96], lengths[119]) == (150, 200)
    assert notes == ["3 of 4 batches of 64", "3 of 9 batches of 24"]


def test_a_split_of_those_lengths_starts_each_document_with_bos():
    split = ts.split_of(np.array([3, 5, 2]), bos=1)
    assert split.tolist() == [1, 0, 1, 0, 0, 0, 1, 1]  # 2 + 4 + 1 predictions, the last BOS


def test_the_records_batches_go_to_the_first_free_rank_in_queue_order():
    costs = {0: 10.0, 1: 4.0, 2: 4.0, 3: 3.0, 4: 1.0}
    assert ts.claimed(costs, [(0, 3), (3, 5)], world=2) == [[10.0, 8.0], [3.0, 1.0]]


def test_the_cli_replays_each_preset_and_projects_labelled_seconds(tmp_path, capsys):
    for name, text in (("pr1855", LOG64), ("pr2014", LOG24), ("pr2135", LOG64)):
        (tmp_path / f"{name}_train_seed0.log").write_text(text)
    out = tmp_path / "out.json"
    assert ts.main(["--logs", str(tmp_path), "--world-size", "2", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("documents: rebuilt from the logs' ttp lines (")
    results = json.loads(out.read_text())["results"]
    assert [r["preset"] for r in results] == ["pr1855", "pr2014", "pr2135"]
    for r in results:
        assert r["ours_critical_pflop"] <= r["record_critical_pflop"] and r["ratio"] <= 1.0
        assert len(r["ours_busy_pflop"]) == len(r["record_busy_pflop"]) == 2
        assert r["projected_eval_s"] == round(r["record_eval_s"] * r["ratio"], 1)
        assert r["same_graphs_on_every_rank"] and r["graphs_per_rank"][0] <= 3
    assert printed.count("(a projection, not measured on GPU)") == 3


def test_missing_logs_are_named(tmp_path, capsys):
    assert ts.main(["--logs", str(tmp_path / "none")]) == 2
    assert "no such folder" in capsys.readouterr().err
