"""The pool of independent full-length trials that single, random and grid share.

Owns: ``IndependentSearcher`` -- up to ``total`` trials, each trained to
``max_length`` and validated there (no ``max_length``: length 0, the trial runs
until its training code ends), at most ``concurrency`` alive at once
(0 = all); a new ``Create`` each time a trial exits (for any reason: Determined
counts an errored trial as closed) until ``total`` were created -- a trial that
exited with ``invalid_hp`` is not counted when the subclass ``replaces_invalid``
(random: Determined's ``randomSearch.trialExitedEarly`` gives it a replacement;
grid and single do not: the grid point, or the single trial, is simply done); ``top_up``
after ``max_concurrent_trials`` grew; ``Shutdown`` once every created trial
exited; and its snapshot (keys ``searcher``, ``rng``, ``next_id``, ``running``,
``records``, ``shutdown_sent``: the store keeps these, do not rename them; the
count of invalid trials is read back from the records' status); ``snapshot_text`` builds
that snapshot's text from each record's encoding, made at the restore and kept until the
record changes (a validation, an exit: at 50,000 trials re-encoding 50,000 records was
~0.25 s of every tick that told the searcher anything, bench/tick_scale).
Subclasses say how many trials there are and where the n-th trial's hparams
come from (``_hparams``; default: sampled from the tree).
Must not: do I/O, read the clock or use the global RNG; early-stop anything.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from typing import Any

from dethpc.common.exitcodes import TrialExit
from dethpc.config.model import HParamTree, SearcherConfig
from dethpc.searchers import sampling
from dethpc.searchers.base import (
    SNAPSHOT_SEPARATORS,
    Action,
    Create,
    Searcher,
    Shutdown,
    TrialRecord,
    check_reason,
    exit_status,
    record_from_json,
    record_to_json,
    trial_length,
)


class IndependentSearcher(Searcher):
    """Up to ``total`` independent full-length trials, ``concurrency`` at a time."""

    name = "pool"
    #: a trial that exited ``invalid_hp`` does not count towards ``total`` (a new one
    #: with fresh hyperparameters takes its place)
    replaces_invalid = False

    def __init__(self, config: SearcherConfig, hparams: HParamTree, seed: int,
                 total: int, concurrency: int) -> None:
        self.config = config
        self.tree = hparams
        self.length = trial_length(config)  # 0: until the training code ends
        self.total = total
        self.concurrency = concurrency if concurrency > 0 else total
        self.rng = random.Random(seed)
        self.next_id = 1
        self.running: set[int] = set()
        self.records: dict[int, TrialRecord] = {}
        #: trials that exited ``invalid_hp``
        self.invalid = 0
        self.shutdown_sent = False
        #: request id -> its record's JSON text (``record_to_json``), dropped whenever
        #: this searcher changes the record (``_changed``)
        self._encoded: dict[int, str] = {}

    # ------------------------------------------------------------------ hooks
    def _hparams(self, index: int) -> dict[str, Any]:
        """Hparams of the ``index``-th created trial (0-based)."""
        return sampling.sample(self.tree, self.rng)

    # ------------------------------------------------------------- protocol
    def initial(self) -> list[Action]:
        return self._fill()

    def on_validation(self, request_id: int, metric: float, length: int) -> list[Action]:
        rec = self.records.get(request_id)
        if rec is not None:
            rec.metrics[int(length)] = float(metric)
            self._changed(request_id)
        return []

    def on_exited(self, request_id: int, reason: str) -> list[Action]:
        why = check_reason(reason)
        if request_id not in self.running:
            return []
        self.running.discard(request_id)
        self.records[request_id].status = exit_status(why)
        self._changed(request_id)
        self.invalid += why is TrialExit.INVALID_HP
        return self._fill()

    def progress(self) -> float:
        if self.total == 0:
            return 1.0
        exited = self._spent() - len(self.running)
        return min(1.0, exited / self.total)

    def trials(self) -> list[TrialRecord]:
        return [self.records[k] for k in sorted(self.records)]

    def top_up(self) -> list[Action]:
        return self._fill() if self.records else []

    # -------------------------------------------------------------- internals
    def _spent(self) -> int:
        """Trials created that count towards ``total``."""
        return len(self.records) - (self.invalid if self.replaces_invalid else 0)

    def _fill(self) -> list[Action]:
        actions: list[Action] = []
        while len(self.running) < self.concurrency and self._spent() < self.total:
            actions.append(self._create())
        if not self.running and self._spent() >= self.total and not self.shutdown_sent:
            self.shutdown_sent = True
            actions.append(Shutdown())
        return actions

    def _create(self) -> Create:
        rid = self.next_id
        self.next_id += 1
        hp = self._hparams(len(self.records))
        self.records[rid] = TrialRecord(request_id=rid, hparams=hp)
        self._changed(rid)
        self.running.add(rid)
        return Create(request_id=rid, hparams=hp, length=self.length,
                      validate_at=(self.length,) if self.length else ())

    # ------------------------------------------------------------ snapshot
    def snapshot(self) -> dict[str, Any]:
        return {
            "searcher": self.name,
            "rng": sampling.rng_to_json(self.rng),
            "next_id": self.next_id,
            "running": sorted(self.running),
            "records": [record_to_json(self.records[k]) for k in sorted(self.records)],
            "shutdown_sent": self.shutdown_sent,
        }

    def snapshot_text(self, extra: Mapping[str, Any]) -> str:
        """``Searcher.snapshot_text``, the same characters, with each record's encoding
        taken from ``_encoded`` (encoded once, again only after it changed)."""
        snap = {"searcher": self.name, "rng": sampling.rng_to_json(self.rng),
                "next_id": self.next_id, "running": sorted(self.running)}
        tail = {"shutdown_sent": self.shutdown_sent}
        if any(k in snap or k in tail or k == "records" for k in extra):
            return super().snapshot_text(extra)   # a key replaced: the plain encoding
        head = json.dumps(snap, separators=SNAPSHOT_SEPARATORS)
        rest = json.dumps({**tail, **extra}, separators=SNAPSHOT_SEPARATORS)
        return "".join((head[:-1], ',"records":[', ",".join(map(self._record_text, sorted(
            self.records))), "],", rest[1:]))

    def _record_text(self, request_id: int) -> str:
        text = self._encoded.get(request_id)
        if text is None:
            text = self._encoded[request_id] = json.dumps(
                record_to_json(self.records[request_id]), separators=SNAPSHOT_SEPARATORS)
        return text

    def _changed(self, request_id: int) -> None:
        """The record of ``request_id`` changed: its encoding is made again."""
        self._encoded.pop(request_id, None)

    def restore(self, snapshot: dict[str, Any]) -> None:
        if snapshot.get("searcher") != self.name:
            raise ValueError(f"snapshot of {snapshot.get('searcher')!r} given to {self.name!r}")
        self.rng = sampling.rng_from_json(snapshot["rng"])
        self.next_id = int(snapshot["next_id"])
        self.running = {int(x) for x in snapshot["running"]}
        recs = [record_from_json(d) for d in snapshot["records"]]
        self.records = {r.request_id: r for r in recs}
        # encoded here, with the decode: the restore (a daemon's first tick, a memo
        # miss) pays for it, not the first tick after it that tells the searcher anything
        self._encoded = {r.request_id: json.dumps(record_to_json(r),
                                                  separators=SNAPSHOT_SEPARATORS)
                         for r in recs}
        self.shutdown_sent = bool(snapshot["shutdown_sent"])
        invalid = exit_status(TrialExit.INVALID_HP)  # counted from the records: the format stays
        self.invalid = sum(1 for r in recs if r.status == invalid)
