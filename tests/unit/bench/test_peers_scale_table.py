"""bench/peers_scale/table: the headline's Markdown from a results doc (the dethpc smoke,
trimmed: tests/unit/bench/data/peers_scale_smoke_trimmed.json) and the README block between
the markers replaced, never from a smoke unless asked."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from bench.peers_scale import table
from bench.peers_scale.table import BEGIN, END, render, replace_block

DATA = Path(__file__).parent / "data" / "peers_scale_smoke_trimmed.json"


@pytest.fixture
def doc() -> dict[str, Any]:
    return dict(json.loads(DATA.read_text()))


def _rows(md: str, first: str) -> list[list[str]]:
    """The rows of the table whose header starts with ``first``."""
    lines = md.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith(f"| {first} |"))
    out = []
    for ln in lines[start + 2:]:
        if not ln.startswith("|"):
            break
        out.append([c.strip() for c in ln.strip("|").split("|")])
    return out


def test_one_row_per_cell_plain_first(doc: dict[str, Any]) -> None:
    doc["summary"] = {k: doc["summary"][k] for k in ("dethpc-pool+faults", "dethpc-pool",
                                                     "dethpc-per-job+faults", "dethpc-per-job")}
    rows = _rows(render(doc), "cell")
    assert [r[0] for r in rows] == ["`dethpc-pool`", "`dethpc-per-job`",
                                    "`dethpc-pool+faults`", "`dethpc-per-job+faults`"]
    pool = rows[0]
    assert pool[1] == "1/1" and pool[2] == "55.5 s" and pool[3] == "323 s"
    assert pool[8] == "3.31"                    # RPCs per trial, as the summary has it


def test_the_run_is_stated_above_the_table(doc: dict[str, Any]) -> None:
    head = render(doc).split("\n\n", 1)[0]
    assert "SMOKE TEST" in head
    assert "`610992b1de`" in head and "2026-12-02 04:16:04" in head
    assert "seeds 0:" in head and "64 emulated GPUs" in head and "16 nodes" in head
    assert "faults refused by Slurm: 0" in head and "cut short" not in head  # not counted
    doc["fault_outcomes"] = {"optuna+faults-s2": [{"kind": "preempt", "refused": False,
                                                   "cut_short": True}]}
    assert "faults refused by Slurm: 0; preemptions cut short by the cell's end (not " \
        "refused): 1" in render(doc)
    doc["faults_cut_short"] = 0                 # counted by the run: said, even at 0
    assert "(not refused): 0" in render(doc)
    doc["smoke"] = False
    assert "SMOKE" not in render(doc) and "QUICK" not in render(doc)
    doc["params"]["quick"] = True               # a --quick run says it is not the full table
    assert "QUICK RUN" in render(doc).split("\n\n", 1)[0]


def test_each_limit_is_stated(doc: dict[str, Any]) -> None:
    """The full run's cells have two limits and the faults their own horizon (run.py's
    regime): the text above the table says each."""
    doc["params"].update(timeout=190.0, plain_timeout=70.0, fault_horizon=270.0, faults="both")
    head = render(doc).split("\n\n", 1)[0]
    assert ("a fault cell's limit 190 s, a plain cell's 70 s (the faults spread over a "
            "270 s horizon) from its first sbatch") in head
    doc["params"].update(plain_timeout=190.0, fault_horizon=190.0)
    assert "a cell's limit 190 s from its first sbatch" in render(doc)


def test_misses_are_shown(doc: dict[str, Any]) -> None:
    s = doc["summary"]
    s["dethpc-pool+faults"].update(reached="2/3", trials_lost=2,
                                   wall_until_decided_median_s=None,
                                   trials_unfinished_at_timeout=4)
    md = render(doc)
    row = next(r for r in _rows(md, "cell") if r[0] == "`dethpc-pool+faults`")
    assert row[1] == "**2/3**" and row[4] == "**2**" and row[7] == "**1**"
    assert row[3] == "**not all by 500 s** (4 unfinished)"
    goals = _rows(md, "dethpc")
    lost = next(r for r in goals if r[0] == "`dethpc-pool`" and "trials lost" in r[1])
    assert lost[2] == "**missed**"
    # no peer in this doc: the comparisons are not measured, and said so
    assert any(r[2] == "_not measured_" for r in goals)


def test_goals_come_from_the_doc_when_it_has_them(doc: dict[str, Any]) -> None:
    from bench.peers_scale.goals import goals
    g = goals(doc["summary"])
    g["systems"]["dethpc-pool"][0]["why"] = "a figure only the doc's goals hold"
    doc["goals"] = g
    assert "a figure only the doc's goals hold" in render(doc)


@pytest.mark.parametrize(("text", "want"), [
    (f"a\n{BEGIN}\nold\ntable\n{END}\nb\n", f"a\n{BEGIN}\nNEW\n{END}\nb\n"),
    (f"{BEGIN}{END}", f"{BEGIN}\nNEW\n{END}"),
])
def test_replace_block(text: str, want: str) -> None:
    got = replace_block(text, "NEW\n")
    assert got == want
    assert replace_block(got, "NEW") == want           # idempotent


@pytest.mark.parametrize("text", [
    "no markers", f"{BEGIN} only", f"{END} only", f"{END}\n{BEGIN}",
    f"{BEGIN}{END}{BEGIN}{END}"])
def test_replace_block_refuses_bad_markers(text: str) -> None:
    with pytest.raises(ValueError):
        replace_block(text, "NEW")


def _readmes(tmp_path: Path) -> list[Path]:
    files = [tmp_path / "README.md", tmp_path / "sub.md"]
    for f in files:
        f.write_text(f"# t\n{BEGIN}\nold\n{END}\nafter\n")
    return files


def test_write_refuses_a_smoke(doc: dict[str, Any], tmp_path: Path) -> None:
    src = tmp_path / "doc.json"
    src.write_text(json.dumps(doc))
    files = _readmes(tmp_path)
    argv = [str(src), "--write", *(a for f in files for a in ("--readme", str(f)))]
    assert table.main(argv) == 2
    assert all("old" in f.read_text() for f in files)
    assert table.main([*argv, "--allow-smoke"]) == 0
    for f in files:
        t = f.read_text()
        assert "old" not in t and "| `dethpc-pool` |" in t and t.endswith(f"{END}\nafter\n")


def test_write_is_all_or_nothing(doc: dict[str, Any], tmp_path: Path) -> None:
    real = copy.deepcopy(doc)
    real["smoke"] = False
    src = tmp_path / "doc.json"
    src.write_text(json.dumps(real))
    files = _readmes(tmp_path)
    files[1].write_text("no markers here\n")
    argv = [str(src), "--write", *(a for f in files for a in ("--readme", str(f)))]
    assert table.main(argv) == 2
    assert "old" in files[0].read_text()


def test_the_start_up_split_is_stated(doc: dict[str, Any]) -> None:
    """Since the start-up split (emulator: container once a job run, CUDA once a
    process) the text says both parts; a run from before says the total alone."""
    doc["params"]["startup_s"] = 10.0
    doc["params"].pop("container_s", None)
    assert "start-up 10 s)" in render(doc)
    doc["params"].update(container_s=4.0)
    assert ("start-up 10 s: container 4 s once a job run, CUDA 6 s once a process)"
            in render(doc))


def test_a_recount_of_the_same_file_adds_the_work_thrown_away(doc: dict[str, Any]) -> None:
    """Rows of the same file at the same commit fill a cell whose seeds they all cover;
    another file's rows, another commit's, or a cell short of a seed change nothing."""
    doc["summary"] = {k: doc["summary"][k] for k in ("dethpc-pool", "dethpc-pool+faults",
                                                     "dethpc-per-job+faults")}
    assert table.THROWN_COLUMN not in render(doc)           # not counted: no column
    seeds = doc["summary"]["dethpc-pool+faults"]["seeds"]
    thrown = {"gpu_hours_thrown": 0.0012, "runs_cut": 3, "runs_cut_never_resumed": 1}
    recount = {"runs": [
        *({"file": "r.json", "commit": doc["commit"], "cell": "dethpc-pool+faults",
           "seed": s, "thrown": thrown} for s in seeds),
        {"file": "other.json", "commit": doc["commit"], "cell": "dethpc-pool",
         "seed": doc["summary"]["dethpc-pool"]["seeds"][0], "thrown": thrown},
        {"file": "r.json", "commit": "0" * 40, "cell": "dethpc-per-job+faults",
         "seed": doc["summary"]["dethpc-per-job+faults"]["seeds"][0], "thrown": thrown}]}
    got = table.with_thrown(doc, recount, "r.json")
    assert got["summary"]["dethpc-pool+faults"]["gpu_hours_thrown"] == \
        round(0.0012 * len(seeds), 4)
    assert got["summary"]["dethpc-pool"].get("gpu_hours_thrown") is None
    assert got["summary"]["dethpc-per-job+faults"].get("gpu_hours_thrown") is None
    md = render(got)
    header = next(ln for ln in md.splitlines() if ln.startswith("| cell |"))
    assert table.THROWN_COLUMN in header
    rows = {r[0]: r for r in _rows(md, "cell")}
    assert rows["`dethpc-pool+faults`"][7] == f"{0.0012 * len(seeds):.4f} ({len(seeds)})"
    assert rows["`dethpc-pool`"][7] == "--"
    assert "recounted after the run" in md
