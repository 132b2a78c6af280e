"""``dethpc experiment plot`` (issue 17 item 2): learning curves, ASHA's rungs and the
metric against each hyperparameter, drawn by the real matplotlib into real files.

Experiments are built in a private store the way the reconciler builds them: the real
ASHA searcher decides (``Create``/``Continue``/``Stop``), every validation becomes a
``Metric`` row and a searcher call, stopped trials exit ``stopped``, and the searcher's
snapshot is stored. A 10-trial experiment (stopping variant, two brackets) and a
1,000-trial one (promotion variant, three brackets) are drawn as PNG and SVG; the images
are kept under pytest's tmp dir (``plots*/``): ``docs/img/plot-10-trials.png`` and
``docs/img/plot-1000-trials.png`` are copies of them.
"""

from __future__ import annotations

import math
import random
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from matplotlib.legend import Legend
from matplotlib.text import Text
from PIL import Image
from sqlalchemy import insert as sa_insert
from sqlmodel import select
from typer.testing import CliRunner

from dethpc.config.model import CategoricalHP, ConstHP, DoubleHP, IntHP, LogHP
from dethpc.control.experiments import current_user
from dethpc.store.models import Experiment, Metric, SearcherState, Trial, TrialState
from dethpc.surfaces.cli.common import ENV
from dethpc.surfaces.cli.main import app
from dethpc.surfaces.plots import draw
from dethpc.surfaces.plots.data import (
    AxisKind,
    Outcome,
    TrialPoint,
    axis_kind,
    dedupe_steps,
    gather,
    rung_outcome,
    top_trials,
)
from tests.fixtures.cli_home import private_home

HPARAMS: dict[str, Any] = {
    "lr": {"type": "log", "base": 10, "minval": -4, "maxval": -1},
    "optimizer": {"type": "categorical", "vals": ["adam", "sgd", "adamw"]},
    "model": {"width": {"type": "int", "minval": 16, "maxval": 256},
              "dropout": {"type": "double", "minval": 0.0, "maxval": 0.5}},
    "seed_const": 7,
}


def config(name: str, trials: int, variant: str, divisor: int, rungs: int,
           length: int) -> dict[str, Any]:
    return {"name": name, "entrypoint": "python3 train.py", "hyperparameters": HPARAMS,
            "searcher": {"name": "adaptive_asha", "metric": "validation_loss",
                         "smaller_is_better": True, "max_length": {"batches": length},
                         "max_trials": trials, "max_concurrent_trials": 0, "mode": "standard",
                         "divisor": divisor, "max_rungs": rungs, "variant": variant},
            "reproducibility": {"experiment_seed": 5}}


def loss(hp: dict[str, Any], steps: int, rng: random.Random) -> float:
    """A learning curve that depends on the hyperparameters: lr near 1e-2 and adamw win."""
    floor = 0.05 + 0.3 * abs(math.log10(hp["lr"]) + 2) + {"adam": 0.05, "sgd": 0.2}.get(
        hp["optimizer"], 0.0) + 0.2 * hp["model"]["dropout"]
    return floor + 2.0 / (1 + steps / 16) + rng.uniform(0, 0.02)


def simulate(cfg_dict: dict[str, Any], run_dir: Path) -> int:
    """Run ``cfg_dict``'s ASHA search to its end as the reconciler would feed it; the
    experiment's id in ``ENV.store``."""
    from dethpc.config import parse_experiment_config
    from dethpc.searchers.base import Continue, Create, Stop
    from dethpc.searchers.factory import make_searcher

    cfg = parse_experiment_config(cfg_dict, "plot test")
    searcher = make_searcher(cfg.searcher, cfg.hyperparameters, cfg.experiment_seed)
    assert cfg.searcher.max_length is not None
    every = max(1, cfg.searcher.max_length.value // 16)
    rng = random.Random(1)
    trials: dict[int, dict[str, Any]] = {}
    running: list[int] = []
    metrics: list[tuple[int, int, float]] = []

    def apply(actions: list[Any]) -> None:
        for a in actions:
            if isinstance(a, Create):
                trials[a.request_id] = {"hp": a.hparams, "at": 0, "target": a.length,
                                        "state": TrialState.RUNNING, "best": None}
                running.append(a.request_id)
            elif isinstance(a, Continue):
                trials[a.request_id].update(target=a.length, state=TrialState.RUNNING)
                running.append(a.request_id)
            elif isinstance(a, Stop) and a.request_id in running:
                running.remove(a.request_id)
                trials[a.request_id]["state"] = TrialState.STOPPED
                apply(searcher.on_exited(a.request_id, "stopped"))

    apply(searcher.initial())
    while running:
        rid = running.pop(0)
        t = trials[rid]
        t["at"] = min(t["at"] + every, t["target"])
        value = loss(t["hp"], t["at"], rng)
        metrics.append((rid, t["at"], value))
        t["best"] = value if t["best"] is None else min(t["best"], value)
        running.append(rid)
        apply(searcher.on_validation(rid, value, t["at"]))
        if rid in running and t["at"] >= t["target"]:
            running.remove(rid)
            t["state"] = (TrialState.COMPLETED if t["target"] >= cfg.searcher.max_length.value
                          else TrialState.WAITING)
            apply(searcher.on_exited(rid, "completed"))
    with ENV.store.session() as s:
        exp = Experiment(name=cfg_dict["name"], config_yaml=yaml.safe_dump(cfg_dict),
                         run_dir=str(run_dir), owner=current_user())
        s.add(exp)
        s.flush()
        assert exp.id is not None
        by_request = insert(s, Trial, [
            {"experiment_id": exp.id, "request_id": rid, "hparams": t["hp"],
             "state": (TrialState.STOPPED if t["state"] is TrialState.WAITING
                       else t["state"]),
             "steps_completed": t["at"], "best_validation": t["best"], "needs_job": False}
            for rid, t in sorted(trials.items())])
        insert(s, Metric, [{"trial_id": by_request[rid], "kind": "validation", "steps": steps,
                            "metrics": {"validation_loss": v, "accuracy": 1 - v / 4},
                            "time": float(n)} for n, (rid, steps, v) in enumerate(metrics)])
        s.add(SearcherState(experiment_id=exp.id, snapshot=searcher.snapshot(),
                            initialized=True, shutdown=True))
        return exp.id


def insert(s: Any, model: Any, rows: list[dict[str, Any]]) -> dict[int, int]:
    """Rows of ``model`` (its defaults, then each row's values) in one INSERT: building
    1,000s of sqlmodel objects costs ~2 ms each; the rows are the same. For trials, the
    ids of the new rows by request id."""
    base = {k: v for k, v in model(**rows[0]).model_dump().items() if k != "id"}
    s.execute(sa_insert(model), [{**base, **r} for r in rows])
    if model is not Trial:
        return {}
    got = s.execute(select(Trial.request_id, Trial.id).where(
        Trial.experiment_id == rows[0]["experiment_id"]))
    return {int(rid): int(tid) for rid, tid in got}


@pytest.fixture(scope="module")
def store_ids(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, int]]:
    """One private store for the module: the 10- and 1,000-trial experiments."""
    with private_home(tmp_path_factory.mktemp("home")) as h:
        yield {"ten": simulate(config("ten-trials", 10, "stopping", 2, 3, 64), h / "r1"),
               "thousand": simulate(config("thousand-trials", 1000, "promotion", 4, 4, 256),
                                    h / "r2")}


def invoke(*args: str) -> Any:
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "100"})


def check_png(path: Path) -> None:
    with Image.open(path) as img:
        img.verify()
    with Image.open(path) as img:
        assert img.format == "PNG"
        assert 1000 <= img.width <= 2000 and 500 <= img.height <= 3000, img.size
        colors = img.convert("RGB").getcolors(maxcolors=1 << 20)
        assert colors is not None and len(colors) > 50     # drawn, not blank


def svg_text(path: Path) -> str:
    root = ET.parse(path).getroot()     # well-formed XML
    assert root.tag.endswith("svg")
    return " ".join(t for el in root.iter() if el.tag.endswith("text")
                    for t in el.itertext())


def texts(fig: Any) -> str:
    """Every text of a figure, not drawn."""
    return " ".join(t.get_text() for t in fig.findobj(Text))


def legends(fig: Any) -> list[Legend]:
    return [o for o in fig.findobj(Legend)]


# --------------------------------------------------------------------- rendering
def test_ten_trials_png_and_svg_through_the_cli(store_ids: dict[str, int],
                                                tmp_path_factory: pytest.TempPathFactory
                                                ) -> None:
    out = tmp_path_factory.mktemp("plots10")
    exp = str(store_ids["ten"])
    for name in ("plot-10-trials.png", "plot-10-trials.svg"):
        result = invoke("experiment", "plot", exp, "-o", str(out / name))
        assert result.exit_code == 0, result.output
        assert result.output == (f"wrote {out / name} (10 trials, 10 curves, 2 ASHA "
                                 "brackets, 4 hyperparameter plots)\n")
    check_png(out / "plot-10-trials.png")
    text = svg_text(out / "plot-10-trials.svg")
    data = gather(ENV.store, store_ids["ten"])
    for expected in ["Learning curves: validation validation_loss by batches", "batches",
                     "ASHA rungs", "bracket 0", "bracket 1", "cut-off", "stopped",
                     "promoted", "lr (log)", "optimizer", "model.width", "model.dropout",
                     "adamw", "best 5"]:
        assert expected in text, expected
    assert "seed_const" not in text     # a constant: nothing to plot
    assert len(data.top) == 5
    for tid in data.top:
        assert f"trial {tid} (" in text     # the legend of the curves
        assert text.count(f"trial {tid}") >= 3     # and labels in the rungs and hparams


def test_thousand_trials_stay_readable(store_ids: dict[str, int],
                                       tmp_path_factory: pytest.TempPathFactory) -> None:
    out = tmp_path_factory.mktemp("plots1000") / "plot-1000-trials.png"
    result = invoke("experiment", "plot", str(store_ids["thousand"]), "-o", str(out))
    assert result.exit_code == 0, result.output
    check_png(out)
    data = gather(ENV.store, store_ids["thousand"])
    assert len(data.trials) == 1000 and len(data.brackets) == 3
    outcomes = {p.outcome for b in data.brackets for r in b.rungs for p in r.points}
    assert {Outcome.PROMOTED, Outcome.STOPPED, Outcome.TOP} <= outcomes
    fig = draw.figure(data)
    found = legends(fig)
    assert len(found) == 2      # the curves' and the rungs'
    for legend in found:
        assert len(legend.get_texts()) <= 10
    text = texts(fig)
    assert "995 other trial(s)" in text
    for tid in data.top:
        assert f"trial {tid} (" in text and text.count(f"trial {tid}") >= 3


def test_a_search_without_rungs_has_no_rung_section(store_ids: dict[str, int],
                                                    tmp_path: Path) -> None:
    """A random search: curves and no rungs; a step reported twice is drawn once."""
    cfg = {"name": "random", "entrypoint": "x", "hyperparameters": {"lr": 0.1},
           "searcher": {"name": "random", "metric": "acc", "smaller_is_better": False,
                        "max_trials": 2, "max_length": {"epochs": 2}}}
    with ENV.store.session() as s:
        exp = Experiment(name="random", config_yaml=yaml.safe_dump(cfg),
                         run_dir=str(tmp_path), owner=current_user())
        s.add(exp)
        s.flush()
        assert exp.id is not None
        exp_id = exp.id
        for n in range(2):
            t = Trial(experiment_id=exp_id, request_id=n + 1, hparams={"lr": 0.1},
                      best_validation=0.5 if n == 0 else None)
            s.add(t)
            s.flush()
            if n == 0:
                for steps, v in ((1, 0.3), (2, 0.4), (2, 0.5)):   # step 2 reported twice
                    s.add(Metric(trial_id=t.id or 0, kind="validation", steps=steps,
                                 metrics={"acc": v}))
    data = gather(ENV.store, exp_id)
    text = texts(draw.figure(data))
    assert "ASHA" not in text and "1 trial(s) without a validation yet" in text
    assert data.curves[0].steps == (1, 2) and data.curves[0].values == (0.3, 0.5)
    assert data.axes == () and data.brackets == () and data.unit == "epochs"


def test_a_snapshot_that_does_not_restore_draws_no_rungs(store_ids: dict[str, int],
                                                        tmp_path: Path) -> None:
    """An ASHA config whose stored snapshot is another searcher's (an edited config)."""
    cfg = config("edited", 4, "stopping", 2, 2, 8)
    with ENV.store.session() as s:
        exp = Experiment(name="edited", config_yaml=yaml.safe_dump(cfg),
                         run_dir=str(tmp_path), owner=current_user())
        s.add(exp)
        s.flush()
        assert exp.id is not None
        exp_id = exp.id
        s.add(SearcherState(experiment_id=exp_id, snapshot={"searcher": "grid"}))
    assert gather(ENV.store, exp_id).brackets == ()


# -------------------------------------------------------------------- bad input
@pytest.mark.parametrize("args, message", [
    (["999", "-o", "x.png"], "experiment 999 does not exist"),
    (["{ten}", "-o", "x.jpg"], "--output: unsupported file type '.jpg' in 'x.jpg'; "
                               "allowed: .png, .svg"),
    (["{ten}", "-o", "plot"], "--output: unsupported file type '(none)'"),
    (["{ten}", "-o", "/nonexistent-dir/x.svg"],
     "--output: directory '/nonexistent-dir' does not exist"),
])
def test_bad_input_is_one_clear_line(store_ids: dict[str, int], args: list[str],
                                     message: str) -> None:
    result = invoke("experiment", "plot", *[a.format(**store_ids) for a in args])
    assert result.exit_code != 0
    assert message in str(result.exception)
    assert type(result.exception).__name__ in ("DethpcError", "NotFoundError")


def test_without_matplotlib_the_cli_says_how_to_install_it(
        store_ids: dict[str, int], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No matplotlib module can be imported (``None`` in ``sys.modules`` is how Python
    spells that) and the drawing module is imported afresh."""
    import dethpc.surfaces.plots

    for name in [m for m in sys.modules if m.split(".")[0] in ("matplotlib", "mpl_toolkits")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.delitem(sys.modules, "dethpc.surfaces.plots.draw")
    monkeypatch.delattr(dethpc.surfaces.plots, "draw")
    result = invoke("experiment", "plot", str(store_ids["ten"]), "-o", str(tmp_path / "x.png"))
    assert result.exit_code == 1
    message = str(result.exception)
    assert type(result.exception).__name__ == "DethpcError" and "\n" not in message
    assert "pip install 'dethpc[plots]'" in message
    assert not (tmp_path / "x.png").exists()


# ------------------------------------------------------------------- pure logic
def tp(tid: int, best: float | None) -> TrialPoint:
    return TrialPoint(tid, tid, "COMPLETED", best, {})


@pytest.mark.parametrize("points, sib, n, want", [
    ([tp(1, 0.3), tp(2, 0.1), tp(3, None), tp(4, 0.2)], True, 5, (2, 4, 1)),
    ([tp(1, 0.3), tp(2, 0.1), tp(3, None), tp(4, 0.2)], False, 2, (1, 4)),
    ([tp(5, 0.1), tp(2, 0.1)], True, 5, (2, 5)),          # ties: lower id first
    ([tp(1, None)], True, 5, ()),
])
def test_top_trials(points: list[TrialPoint], sib: bool, n: int,
                    want: tuple[int, ...]) -> None:
    assert top_trials(points, sib, n) == want


@pytest.mark.parametrize("rows, want", [
    ([], ((), ())),
    ([(2, 0.0, 0.2), (1, 0.0, 0.1)], ((1, 2), (0.1, 0.2))),
    ([(1, 0.0, 0.1), (2, 1.0, 0.2), (2, 5.0, 0.25)], ((1, 2), (0.1, 0.25))),  # requeue
    ([(2, 5.0, 0.25), (2, 1.0, 0.2)], ((2,), (0.25,))),     # the later report wins
])
def test_dedupe_steps(rows: list[tuple[int, float, float]],
                      want: tuple[tuple[int, ...], tuple[float, ...]]) -> None:
    assert dedupe_steps(rows) == want


@pytest.mark.parametrize("rung, n, reached, status, metric, variant, want", [
    (0, 3, 0, "active", None, "stopping", Outcome.EXITED),
    (2, 3, 2, "completed", 0.1, "stopping", Outcome.TOP),
    (0, 3, 1, "stopped", 0.1, "stopping", Outcome.PROMOTED),   # stopped later, higher up
    (1, 3, 1, "stopped", 0.1, "stopping", Outcome.STOPPED),
    (1, 3, 1, "active", 0.1, "stopping", Outcome.PROMOTED),    # beat the cut, trains on
    (1, 3, 1, "active", 0.1, "promotion", Outcome.WAITING),
    (1, 3, 1, "promoted", 0.1, "promotion", Outcome.PROMOTED),
    (0, 3, 0, "errored", 0.1, "promotion", Outcome.EXITED),
    (0, 3, 0, "completed", 0.1, "promotion", Outcome.STOPPED),
])
def test_rung_outcome(rung: int, n: int, reached: int, status: str, metric: float | None,
                      variant: str, want: Outcome) -> None:
    assert rung_outcome(rung, n, reached, status, metric, variant) is want


@pytest.mark.parametrize("spec, values, want", [
    (LogHP(-4, -1), [1e-4, 1e-2], AxisKind.LOG),
    (LogHP(-4, -1), [0.0, 1e-2], AxisKind.LINEAR),          # a log axis needs > 0
    (IntHP(1, 8), [1, 4], AxisKind.LINEAR),
    (DoubleHP(0, 1), [0.1, 0.2], AxisKind.LINEAR),
    (CategoricalHP(("a", "b")), ["a", "b"], AxisKind.CATEGORICAL),
    (CategoricalHP((1, 2)), [1, 2], AxisKind.CATEGORICAL),
    (ConstHP(3), [3, 3], None),
    (None, [0.1, 0.1], None),                               # one value: nothing to show
    (None, [1, 2.5], AxisKind.LINEAR),                      # undeclared numbers
    (None, [True, False], AxisKind.CATEGORICAL),
    (None, ["x", 1], AxisKind.CATEGORICAL),
])
def test_axis_kind(spec: Any, values: list[Any], want: AxisKind | None) -> None:
    assert axis_kind(spec, values) == want


@pytest.mark.parametrize("count, low, high", [(1, 0.6, 0.6), (10, 0.6, 0.6),
                                              (1000, 0.06, 0.1), (10**6, 0.06, 0.06)])
def test_other_alpha(count: int, low: float, high: float) -> None:
    assert low <= draw.other_alpha(count) <= high


@pytest.mark.parametrize("values, want", [([0.1, 0.2], False), ([0.001, 1.0], True),
                                          ([-1.0, 100.0], False), ([], False)])
def test_log_metric(values: list[float], want: bool) -> None:
    assert draw.log_metric(values) is want
