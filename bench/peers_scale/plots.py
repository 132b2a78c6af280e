"""Regret-versus-time plots of a peers-at-scale run (issue 48, item 3).

Owns: from each raw run's ``regret_curve`` (``(seconds after the first sbatch, regret)``
at every improvement of the best validated loss; regret = that loss minus the best loss
any curve shows), one figure per fault mode with a line per system: the median over its
seeds (a seed with no validation yet counts as infinite regret, so the median appears
only once most seeds have validated) and each seed thin, the target's regret as a dashed
line. Written beside the JSON as ``<stem>_regret.svg`` (no faults) and
``<stem>_regret_faults.svg``.

  python -m bench.peers_scale.plots [bench/results/peers_scale.json]

The series are pure (``step_value``, ``median_curve``, ``series``); only ``draw`` imports
matplotlib (the ``bench`` extra).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.peers_scale.goals import DETHPC

REPO = Path(__file__).resolve().parents[2]
DEFAULT_JSON = REPO / "bench" / "results" / "peers_scale.json"
Curve = Sequence[Sequence[float]]


def step_value(curve: Curve, t: float) -> float | None:
    """The regret shown at ``t``: the last point at or before it (None: none yet)."""
    out = None
    for s, r in curve:
        if s > t:
            break
        out = float(r)
    return out


def median_curve(curves: Sequence[Curve], grid: Sequence[float]) -> list[float | None]:
    """The median over ``curves`` at each time of ``grid`` (no value yet = infinite;
    an infinite median is None: not drawn)."""
    out: list[float | None] = []
    for t in grid:
        vals = [step_value(c, t) for c in curves]
        m = statistics.median(math.inf if v is None else v for v in vals) if vals else math.inf
        out.append(None if math.isinf(m) else m)
    return out


def series(doc: Mapping[str, Any]) -> dict[bool, dict[str, list[Curve]]]:
    """``{faults: {system: [each seed's regret curve]}}``, dethpc first."""
    out: dict[bool, dict[str, list[Curve]]] = {}
    for r in doc.get("runs", []):
        out.setdefault(bool(r["faults"]), {}).setdefault(r["system"], []).append(
            [tuple(p) for p in r.get("regret_curve") or []])
    return {f: dict(sorted(s.items(), key=lambda kv: (kv[0] not in DETHPC, kv[0])))
            for f, s in out.items()}


def grid_of(curves: Sequence[Curve], end: float, n: int = 400) -> list[float]:
    """``n`` + 1 times from 0 to ``end`` and every curve's own points."""
    pts = {round(end * i / n, 3) for i in range(n + 1)}
    pts |= {float(s) for c in curves for s, _ in c if s <= end}
    return sorted(pts)


def out_paths(json_path: Path) -> dict[bool, Path]:
    stem = json_path.with_suffix("")
    return {False: Path(f"{stem}_regret.svg"), True: Path(f"{stem}_regret_faults.svg")}


def draw(doc: Mapping[str, Any], json_path: Path) -> list[Path]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    target = doc.get("target") or {}
    target_regret = (float(target["target_loss"]) - float(target["best_loss"])
                     if "target_loss" in target and "best_loss" in target else None)
    params = doc.get("params") or {}
    written = []
    for faults, systems in series(doc).items():
        every = [c for cs in systems.values() for c in cs]
        # each fault mode's own cell limit (a plain cell's may be shorter)
        end = float((params.get("timeout") if faults else
                     params.get("plain_timeout") or params.get("timeout")) or 0.0)
        end_f = end or max((s for c in every for s, _ in c), default=1.0)
        grid = grid_of(every, end_f)
        positive = [r for c in every for _, r in c if r > 0]
        floor = min(positive) / 2 if positive else 1e-4
        fig, ax = plt.subplots(figsize=(8, 4.8))
        colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
        for i, (system, curves) in enumerate(systems.items()):
            color = colors[i % len(colors)]
            for c in curves:                       # each seed, thin
                xs = [float(s) for s, _ in c] + [end_f]
                ys = [max(float(r), floor) for _, r in c]
                if ys:
                    ax.step(xs, [*ys, ys[-1]], where="post", color=color, alpha=0.3, lw=0.7)
            med = median_curve(curves, grid)
            ax.step(grid, [math.nan if v is None else max(v, floor) for v in med],
                    where="post", color=color, lw=2 if system in DETHPC else 1.5,
                    label=f"{system} (median of {len(curves)})")
        if target_regret is not None:
            ax.axhline(max(target_regret, floor), color="grey", ls="--", lw=1,
                       label="target")
        ax.set_yscale("log")
        ax.set_xlim(0, end_f)
        ax.set_xlabel("seconds after the first sbatch")
        ax.set_ylabel("regret (best validated loss - best loss)")
        smoke = " [SMOKE]" if doc.get("smoke") else ""
        ax.set_title(f"peers at scale{smoke}, {'with' if faults else 'without'} faults: "
                     f"commit {str(doc.get('commit', '?'))[:7]}, {doc.get('date', '?')}",
                     fontsize=9)
        ax.legend(fontsize=7, loc="upper right")
        ax.grid(alpha=0.3)
        fig.tight_layout()
        path = out_paths(json_path)[faults]
        fig.savefig(path, format="svg", metadata={"Date": None})
        plt.close(fig)
        written.append(path)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("json", nargs="?", type=Path, default=DEFAULT_JSON)
    args = ap.parse_args(argv)
    for path in draw(json.loads(args.json.read_text()), args.json):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
