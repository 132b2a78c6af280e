"""Draws a ``PlotData`` with matplotlib: learning curves, ASHA's rungs and the searcher
metric against each hyperparameter, in one figure written as PNG or SVG.

Owns: the figure's layout and look, and writing the file. Uses matplotlib's object API
(``Figure`` with the Agg canvas, never ``pyplot``): no display, no global state.
Must not: read the store (``dethpc.surfaces.plots.data`` gathers).

Readable for 10 and for 1,000 trials: the best ``TOP`` trials are drawn in colour and
labelled ("trial N"); every other trial is thin, grey and more translucent the more
trials there are; each legend has at most ``TOP`` + 1 entries (curves) or one per rung
outcome plus the cut-off (rungs).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure, SubFigure
from matplotlib.lines import Line2D

from dethpc.surfaces.plots.data import AxisKind, Bracket, HParamAxis, Outcome, PlotData, TrialPoint

#: colours of the best trials, best first (tab10's, none an outcome's colour)
TOP_COLORS = ("#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")
OTHER = "#7f7f7f"
OUTCOME_STYLE: dict[Outcome, tuple[str, str]] = {   # colour, marker
    Outcome.PROMOTED: ("#2ca02c", "o"),
    Outcome.STOPPED: ("#d62728", "o"),
    Outcome.WAITING: ("#bcbd22", "o"),
    Outcome.EXITED: ("#000000", "x"),
    Outcome.TOP: ("#1f77b4", "o"),
}
#: hyperparameter plots drawn at most (the rest are named in a note)
MAX_HPARAMS = 12
HP_COLUMNS = 3
WIDTH_IN = 14.0
#: section heights in inches: the title, the curves, the rungs, a row of hyperparameters
TITLE_IN, CURVES_IN, RUNGS_IN, HP_ROW_IN = 0.4, 4.5, 3.6, 3.0
DPI = 100


def other_alpha(count: int, *, base: float = 3.0) -> float:
    """Opacity of the non-highlighted trials: 0.6 for a few, down to 0.06 for thousands."""
    return min(0.6, max(0.06, base / math.sqrt(max(count, 1))))


def log_metric(values: Sequence[float]) -> bool:
    """A log metric axis when every value is positive and they span over 2 decades."""
    finite = [v for v in values if math.isfinite(v)]
    return bool(finite) and min(finite) > 0 and max(finite) / min(finite) > 100


def jitter(key: int, width: float = 0.6) -> float:
    """A deterministic horizontal offset in [-width/2, width/2) for a point of ``key``."""
    return ((key * 0.6180339887) % 1.0 - 0.5) * width


def short(text: str, limit: int = 18) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def best(t: TrialPoint) -> float:
    """A trial's best metric; NaN (not drawn) when it has none."""
    return math.nan if t.best is None else t.best


def fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def figure(data: PlotData) -> Figure:
    """The whole figure: a title, then the curves, the rungs (ASHA only) and a grid of
    hyperparameter plots, each section a subfigure."""
    axes = data.axes[:MAX_HPARAMS]
    hp_rows = math.ceil(len(axes) / HP_COLUMNS)
    heights = ([TITLE_IN + CURVES_IN] + ([RUNGS_IN] if data.brackets else [])
               + ([HP_ROW_IN * hp_rows] if hp_rows else []))
    fig = Figure(figsize=(WIDTH_IN, sum(heights)), dpi=DPI)
    FigureCanvasAgg(fig)
    scored = sum(1 for t in data.trials if t.best is not None)
    fig.suptitle(f"experiment {data.experiment_id} {short(data.name, 60)}: "
                 f"{len(data.trials)} trial(s), {scored} with a metric; searcher "
                 f"{data.searcher}, {data.metric} "
                 f"({'smaller' if data.smaller_is_better else 'larger'} is better)",
                 fontsize=12, y=1 - 0.12 / sum(heights), va="top")
    subs = fig.subfigures(len(heights), 1, height_ratios=heights, squeeze=False)[:, 0]
    _curves(subs[0], data)
    _margins(subs[0], heights[0], top=TITLE_IN + 0.35, bottom=0.55)
    if data.brackets:
        _rungs(subs[1], data)
        _margins(subs[1], heights[1], top=0.6, bottom=0.85, wspace=0.06)
    if hp_rows:
        _hparams(subs[-1], data, axes)
        _margins(subs[-1], heights[-1], top=0.6, bottom=0.55, rows=hp_rows, gap=0.85,
                 wspace=0.22)
    return fig


def _margins(sub: SubFigure, height: float, *, top: float, bottom: float, rows: int = 1,
             gap: float = 0.0, wspace: float = 0.2) -> None:
    """A fixed layout (inches): matplotlib's constrained layout costs a second pass over
    every text, ~40% of the drawing time."""
    axes_h = (height - top - bottom - gap * (rows - 1)) / rows
    sub.subplots_adjust(left=0.85 / WIDTH_IN, right=1 - 0.2 / WIDTH_IN, top=1 - top / height,
                        bottom=bottom / height, hspace=gap / axes_h, wspace=wspace)


def save(fig: Figure, path: Path) -> None:
    """Write ``fig`` as PNG or SVG (by suffix); an SVG keeps its text as text."""
    import matplotlib

    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "dethpc"}):
        fig.savefig(path, format=path.suffix.lstrip(".").lower(),
                    metadata={"Date": None} if path.suffix.lower() == ".svg" else None)


# ------------------------------------------------------------------- sections
def _top_label(data: PlotData, trial_id: int) -> str:
    best = next((t.best for t in data.trials if t.trial_id == trial_id), None)
    return f"trial {trial_id} ({fmt(best)})"


def _curves(sub: SubFigure, data: PlotData) -> None:
    ax = sub.subplots()
    top = {tid: i for i, tid in enumerate(data.top)}
    others = [c for c in data.curves if c.trial_id not in top]
    alpha = other_alpha(len(others))
    segs = [list(zip(c.steps, c.values, strict=True)) for c in others if len(c.steps) > 1]
    if segs:
        ax.add_collection(LineCollection(segs, colors=OTHER, linewidths=0.7, alpha=alpha))
    ends = [(c.steps[-1], c.values[-1]) for c in others if c.steps]
    if ends:
        ax.scatter([x for x, _ in ends], [y for _, y in ends], s=6, color=OTHER,
                   alpha=alpha, linewidths=0)
    handles: list[Line2D] = []
    for c in sorted((c for c in data.curves if c.trial_id in top),
                    key=lambda c: top[c.trial_id]):
        color = TOP_COLORS[top[c.trial_id] % len(TOP_COLORS)]
        (line,) = ax.plot(c.steps, c.values, color=color, lw=2, marker="o", ms=3,
                          label=_top_label(data, c.trial_id), zorder=3)
        handles.append(line)
    if others:
        handles.append(Line2D([], [], color=OTHER, alpha=max(alpha, 0.4), lw=1,
                              label=f"{len(others)} other trial(s)"))
    for length in _rung_lengths(data):
        ax.axvline(length, color="#cccccc", lw=0.8, ls=":", zorder=0)
    ax.autoscale_view()
    if log_metric([v for c in data.curves for v in c.values]):
        ax.set_yscale("log")
    missing = len(data.trials) - len(data.curves)
    ax.set_title(f"Learning curves: validation {data.metric} by {data.unit}"
                 + (f" ({missing} trial(s) without a validation yet)" if missing else ""))
    ax.set_xlabel(data.unit)
    ax.set_ylabel(data.metric)
    ax.grid(alpha=0.3)
    if handles:
        ax.legend(handles=handles, title=f"best {len(data.top)}", fontsize=8,
                  title_fontsize=8, loc="best")
    if not data.curves:
        ax.text(0.5, 0.5, "no validation metric reported yet", ha="center",
                transform=ax.transAxes)


def _rung_lengths(data: PlotData) -> list[int]:
    return sorted({r.length for b in data.brackets for r in b.rungs})


def _rungs(sub: SubFigure, data: PlotData) -> None:
    axs = sub.subplots(1, len(data.brackets), sharey=True, squeeze=False)[0]
    sub.suptitle(f"ASHA rungs: {data.metric} where each trial was promoted or stopped; "
                 "dashes: the cut-off per rung", fontsize=11)
    values = [p.metric for b in data.brackets for r in b.rungs for p in r.points
              if p.metric is not None]
    logy = log_metric(values)
    lo, hi = (min(values), max(values)) if values else (0.0, 1.0)
    worse = hi if data.smaller_is_better else lo
    span = (hi - lo) or abs(hi) or 1.0
    exited_y = (worse * 1.5 if data.smaller_is_better else worse / 1.5) if logy \
        else worse + (0.06 if data.smaller_is_better else -0.06) * span
    seen: set[Outcome] = set()
    for ax, bracket in zip(axs, data.brackets, strict=True):
        seen |= _bracket(ax, data, bracket, exited_y)
        if logy:
            ax.set_yscale("log")
    axs[0].set_ylabel(data.metric)
    handles = [Line2D([], [], color=OUTCOME_STYLE[o][0], marker=OUTCOME_STYLE[o][1], ls="",
                      label=o.value + (" (no metric)" if o is Outcome.EXITED else ""))
               for o in Outcome if o in seen]
    handles.append(Line2D([], [], color="black", ls="--", lw=1.5, label="cut-off"))
    axs[0].legend(handles=handles, fontsize=8, loc="best")


def _bracket(ax: Axes, data: PlotData, bracket: Bracket, exited_y: float) -> set[Outcome]:
    top = {tid: i for i, tid in enumerate(data.top)}
    count = sum(len(r.points) for r in bracket.rungs)
    alpha = other_alpha(count, base=6.0)
    seen: set[Outcome] = set()
    paths: dict[int, list[tuple[float, float]]] = {}
    for rung in bracket.rungs:
        for outcome in Outcome:
            pts = [p for p in rung.points if p.outcome is outcome
                   and (p.trial_id is None or p.trial_id not in top)]
            if not pts:
                continue
            seen.add(outcome)
            color, marker = OUTCOME_STYLE[outcome]
            ax.scatter([rung.index + jitter(p.trial_id or 0) for p in pts],
                       [exited_y if p.metric is None else p.metric for p in pts],
                       s=14, color=color, marker=marker, alpha=alpha, linewidths=0.8
                       if marker == "x" else 0)
        for p in rung.points:
            if p.trial_id in top:
                seen.add(p.outcome)
                y = exited_y if p.metric is None else p.metric
                paths.setdefault(p.trial_id, []).append((rung.index, y))
                ax.scatter([rung.index], [y], s=40, color=OUTCOME_STYLE[p.outcome][0],
                           edgecolors=TOP_COLORS[top[p.trial_id] % len(TOP_COLORS)],
                           linewidths=2, zorder=4)
        if rung.cutoff is not None:
            ax.hlines(rung.cutoff, rung.index - 0.4, rung.index + 0.4, colors="black",
                      linestyles="--", lw=1.5, zorder=5)
    for tid, path in paths.items():
        color = TOP_COLORS[top[tid] % len(TOP_COLORS)]
        xs, ys = zip(*path, strict=True)
        ax.plot(xs, ys, color=color, lw=1.2, zorder=3)
        ax.annotate(f"trial {tid}", path[-1], xytext=(6, 2 + 8 * top[tid]),
                    textcoords="offset points",
                    fontsize=7, color=color, zorder=6)
    ax.set_xticks([r.index for r in bracket.rungs],
                  [f"rung {r.index}\n{r.length} {data.unit}\n{len(r.points)} trial(s)"
                   for r in bracket.rungs], fontsize=8)
    ax.set_xlim(-0.6, len(bracket.rungs) - 0.4)
    ax.set_title(f"bracket {bracket.index}", fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    return seen


def _hparams(sub: SubFigure, data: PlotData, axes: Sequence[HParamAxis]) -> None:
    rows = math.ceil(len(axes) / HP_COLUMNS)
    grid = sub.subplots(rows, HP_COLUMNS, squeeze=False)
    left = len(data.axes) - len(axes)
    sub.suptitle(f"best {data.metric} of each trial against each hyperparameter"
                 + (f" ({left} more not drawn: "
                    f"{', '.join(a.name for a in data.axes[len(axes):])})" if left else ""),
                 fontsize=11)
    scored = [t for t in data.trials if t.best is not None]
    logy = log_metric([t.best for t in scored if t.best is not None])
    for i, ax in enumerate(grid.flat):
        if i >= len(axes):
            ax.remove()
            continue
        _hparam(ax, data, axes[i], scored)
        if logy:
            ax.set_yscale("log")
        if i % HP_COLUMNS == 0:
            ax.set_ylabel(data.metric)


def _hparam(ax: Axes, data: PlotData, axis: HParamAxis, scored: list[TrialPoint]) -> None:
    from dethpc.surfaces.plots.data import category_label

    pts = [t for t in scored if axis.name in t.hparams]
    top = {tid: i for i, tid in enumerate(data.top)}
    categorical = axis.kind is AxisKind.CATEGORICAL
    index = {c: i for i, c in enumerate(axis.categories)}

    def x_of(t: TrialPoint) -> float:
        value = t.hparams[axis.name]
        if categorical:
            return index[category_label(value)] + jitter(t.trial_id, 0.5)
        return float(value)

    others = [t for t in pts if t.trial_id not in top]
    if categorical:
        groups = [[best(t) for t in pts if category_label(t.hparams[axis.name]) == c]
                  for c in axis.categories]
        ax.boxplot([g or [math.nan] for g in groups], positions=range(len(groups)),
                   widths=0.6, showfliers=False, medianprops={"color": "black"},
                   boxprops={"color": "#555555"}, whiskerprops={"color": "#555555"},
                   capprops={"color": "#555555"})
        ax.set_xticks(range(len(axis.categories)), [short(c) for c in axis.categories],
                      rotation=20 if len(axis.categories) > 3 else 0, fontsize=8)
    if others:
        ax.scatter([x_of(t) for t in others], [best(t) for t in others], s=10, color=OTHER,
                   alpha=other_alpha(len(others), base=8.0), linewidths=0)
    for t in sorted((t for t in pts if t.trial_id in top), key=lambda t: top[t.trial_id]):
        color = TOP_COLORS[top[t.trial_id] % len(TOP_COLORS)]
        x = x_of(t)
        ax.scatter([x], [best(t)], s=36, color=color, zorder=4, edgecolors="black",
                   linewidths=0.5)
        ax.annotate(f"trial {t.trial_id}", (x, best(t)), xytext=(5, 3 + 8 * top[t.trial_id]),
                    textcoords="offset points", fontsize=7, color=color, zorder=5)
    if axis.kind is AxisKind.LOG:
        ax.set_xscale("log")
    ax.set_xlabel(axis.name + (" (log)" if axis.kind is AxisKind.LOG else ""))
    ax.set_title(short(axis.name, 40), fontsize=10)
    ax.grid(alpha=0.3)
