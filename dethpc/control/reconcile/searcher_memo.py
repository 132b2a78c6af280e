"""The searcher of each experiment kept between ticks, as its stored snapshot restores it.

Owns: ``SearcherMemo`` -- per experiment, the searcher object a committed tick left,
with the snapshot text the store holds for it and the config it was made under;
``read_snapshot`` (the stored snapshot as its text, and the searcher it restores, from
the memo when that text is the one kept) and ``snapshot_text`` / ``write_snapshot``
(a snapshot encoded once and stored as that text).
Must not: be the truth. The store's snapshot is: a searcher is taken from the memo
only when the text the store holds now is, character for character, the text it was
kept with, under the same stored config; any other writer, a rolled-back tick or a
restarted daemon simply misses and decodes the snapshot as before. An entry is taken
out when a tick starts using it and put back only after that tick's transaction
committed (``Reconciling``), so a tick that fails leaves nothing half-changed here.

Why (issue 47 item 2, bench/tick_scale): at 10,000 trials the random searcher's
snapshot is 1.5 MB of JSON; decoding it and restoring 10,000 records was ~40 ms of
every tick (and of every fast tick between them), for a searcher that is most often
exactly the one the last tick stored.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import JSON, Text, bindparam, cast, literal
from sqlalchemy import select as sa_select
from sqlalchemy.orm import defer
from sqlalchemy.sql.elements import ColumnElement
from sqlmodel import Session, col

from dethpc.config.model import ExperimentConfig
from dethpc.searchers.base import Searcher
from dethpc.searchers.factory import make_searcher
from dethpc.store.models import Experiment, SearcherState

#: the limit a snapshot was taken under, so a change (set-concurrency) is seen once
CONCURRENCY_KEY = "_max_concurrent_trials"

SEARCHER_STATE = SearcherState.__table__  # type: ignore[attr-defined]


@dataclass
class Kept:
    """One experiment's searcher as a committed tick left it."""

    config: str          # the stored config (``Experiment.config_yaml``) it was made under
    text: str            # the snapshot text the store holds for it
    searcher: Searcher
    concurrency: int | None   # ``CONCURRENCY_KEY`` of that snapshot
    #: when a tick under this snapshot last applied the checkpoint policy to every trial
    #: (``tick.ExperimentReconciler._gc_scope``); None: not known
    gc_full_at: float | None = None


@dataclass
class Restored:
    """A tick's searcher: restored from ``text`` (or from the memo, for that text)."""

    searcher: Searcher
    text: str
    #: a snapshot was stored (False: the first tick, a fresh searcher)
    restored: bool
    #: max_concurrent_trials the last tick ran with (None: first tick, older snapshot)
    concurrency: int | None
    #: it came from the memo (nothing decoded)
    hit: bool = False
    #: ``Kept.gc_full_at`` of the memo's entry (None on a miss)
    gc_full_at: float | None = None


class SearcherMemo:
    """exp id -> ``Kept``; a hint, see the module docstring."""

    def __init__(self) -> None:
        self._kept: dict[int, Kept] = {}
        #: reads answered from the memo, and decoded (for tests and benchmarks)
        self.hits = self.misses = 0

    def take(self, exp_id: int, config: str, text: str) -> Kept | None:
        """The kept searcher of ``exp_id`` if it was kept with ``text`` under ``config``;
        the entry leaves the memo either way."""
        kept = self._kept.pop(exp_id, None)
        if kept is not None and kept.config == config and kept.text == text:
            self.hits += 1
            return kept
        self.misses += 1
        return None

    def keep(self, exp_id: int, kept: Kept) -> None:
        """After the transaction that stored ``kept.text`` committed."""
        self._kept[exp_id] = kept

    def retain(self, exp_ids: Iterable[int]) -> None:
        """Forget every experiment but ``exp_ids`` (the open ones: an ended experiment's
        searcher is not held for the daemon's lifetime)."""
        keep = set(exp_ids)
        for exp_id in [e for e in self._kept if e not in keep]:
            del self._kept[exp_id]

    def __contains__(self, exp_id: int) -> bool:
        return exp_id in self._kept


#: the snapshot as its text (the column is not decoded), and with the row, built once
_TEXT = cast(SEARCHER_STATE.c.snapshot, Text)
STORED_TEXT = sa_select(_TEXT).where(SEARCHER_STATE.c.experiment_id == bindparam("exp"))
STATE_AND_TEXT = sa_select(SearcherState, _TEXT).options(
    defer(SearcherState.snapshot)).where(  # type: ignore[arg-type]
    SEARCHER_STATE.c.experiment_id == bindparam("exp"))


def stored_text(s: Session, exp_id: int) -> str:
    """The stored snapshot of ``exp_id`` as its text, not decoded ("" without a row)."""
    text = s.execute(STORED_TEXT, {"exp": exp_id}).scalar()
    return text or ""


def load_state(s: Session, exp_id: int) -> tuple[SearcherState | None, str]:
    """The searcher state row of ``exp_id`` (its snapshot column left unloaded) and the
    stored snapshot as its text ("" without a row), in one statement (two were a fixed
    cost of every reconcile, fast or not: bench/daemon_cost)."""
    row = s.execute(STATE_AND_TEXT, {"exp": exp_id}).first()
    if row is None:
        return None, ""
    return row[0], row[1] or ""


EXPERIMENT_AND_STATE = sa_select(Experiment, SearcherState, _TEXT).outerjoin(
    SearcherState, SEARCHER_STATE.c.experiment_id == Experiment.id).options(
    defer(SearcherState.snapshot)).where(  # type: ignore[arg-type]
    col(Experiment.id) == bindparam("exp"))


def load_experiment(s: Session, exp_id: int) -> tuple[Experiment | None, SearcherState | None,
                                                      str]:
    """The experiment's row with ``load_state``'s two, in one statement (None, None, ""
    without the experiment)."""
    row = s.execute(EXPERIMENT_AND_STATE, {"exp": exp_id}).first()
    if row is None:
        return None, None, ""
    return row[0], row[1], row[2] or ""


def read_snapshot(s: Session, exp_id: int, config: str, cfg: ExperimentConfig,
                  memo: SearcherMemo | None, *, text: str | None = None) -> Restored:
    """The searcher of ``exp_id`` as its stored snapshot restores it: the memo's when it
    was kept with the very text stored now, else made from ``cfg`` and restored from the
    decoded text. ``text``: the stored text as the caller read it (``load_state``);
    None: read here."""
    if text is None:
        text = stored_text(s, exp_id)
    kept = memo.take(exp_id, config, text) if memo is not None else None
    if kept is not None:
        return Restored(kept.searcher, text, True, kept.concurrency, hit=True,
                        gc_full_at=kept.gc_full_at)
    snapshot: dict[str, Any] = json.loads(text) if text else {}
    searcher = make_searcher(cfg.searcher, cfg.hyperparameters, cfg.experiment_seed)
    if snapshot:
        searcher.restore(snapshot)
    return Restored(searcher, text, bool(snapshot), snapshot.get(CONCURRENCY_KEY))


def snapshot_text(searcher: Searcher, concurrency: int) -> str:
    """The searcher's snapshot with the limit it ran under, as the text to store."""
    return searcher.snapshot_text({CONCURRENCY_KEY: concurrency})


def write_snapshot(s: Session, exp_id: int, text: str) -> None:
    """Store ``text`` as the snapshot of ``exp_id`` (its row exists, flushed), as it is:
    encoded once here, not again by the column's JSON type."""
    value: ColumnElement[Any] = literal(text, Text)
    if s.get_bind().dialect.name == "postgresql":
        value = cast(value, JSON)   # a json column takes text by an explicit cast
    s.execute(SEARCHER_STATE.update().where(SEARCHER_STATE.c.experiment_id == exp_id)
              .values(snapshot=value))
