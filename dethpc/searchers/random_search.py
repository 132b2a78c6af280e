"""The random searcher (and the shared machinery of single and grid).

Owns: ``RandomSearcher`` -- ``max_trials`` trials with hparams sampled from the
tree, at most ``max_concurrent_trials`` alive at once; a new ``Create`` each
time a trial exits (for any reason: Determined counts an errored trial as
closed) until ``max_trials`` were created; ``Shutdown`` once every created
trial exited. Also ``PoolSearcher``, the base it shares with ``SingleSearcher``
and ``GridSearcher``, and ``target_length``.
Must not: do I/O, read the clock or use the global RNG; early-stop anything.
"""

from __future__ import annotations

import random
from typing import Any

from dethpc.config.model import HParamTree, SearcherConfig
from dethpc.errors import ConfigError, FieldError
from dethpc.searchers import sampling
from dethpc.searchers.base import Action, Create, Searcher, Shutdown, TrialRecord

#: exit reasons a searcher accepts in ``on_exited``
EXIT_REASONS = ("completed", "stopped", "errored", "cancelled")


def target_length(config: SearcherConfig) -> int:
    """``searcher.max_length`` in its unit; a ``ConfigError`` when it is missing."""
    if config.max_length is None or config.max_length.value < 1:
        raise ConfigError(
            [FieldError("searcher.max_length",
                        "required and >= 1, e.g. `max_length: {batches: 1000}`")],
            source="experiment config",
        )
    return config.max_length.value


def check_reason(reason: str) -> None:
    if reason not in EXIT_REASONS:
        raise ValueError(f"unknown exit reason {reason!r}; allowed: {', '.join(EXIT_REASONS)}")


def exit_status(reason: str) -> str:
    """TrialRecord status for a trial that exited with ``reason`` unasked."""
    return {"completed": "completed", "errored": "errored"}.get(reason, "stopped")


def record_to_json(r: TrialRecord) -> dict[str, Any]:
    return {"request_id": r.request_id, "hparams": r.hparams, "bracket": r.bracket,
            "rung": r.rung, "status": r.status,
            "metrics": [[length, m] for length, m in sorted(r.metrics.items())]}


def record_from_json(d: dict[str, Any]) -> TrialRecord:
    return TrialRecord(request_id=int(d["request_id"]), hparams=d["hparams"],
                       bracket=int(d["bracket"]), rung=int(d["rung"]), status=str(d["status"]),
                       metrics={int(k): float(v) for k, v in d["metrics"]})


class PoolSearcher(Searcher):
    """Up to ``total`` independent full-length trials, ``concurrency`` at a time.

    Subclasses say where the hparams of the n-th trial come from (``_hparams``).
    """

    name = "pool"

    def __init__(self, config: SearcherConfig, hparams: HParamTree, seed: int,
                 total: int, concurrency: int) -> None:
        self.config = config
        self.tree = hparams
        self.length = target_length(config)
        self.total = total
        self.concurrency = concurrency if concurrency > 0 else total
        self.rng = random.Random(seed)
        self.next_id = 1
        self.running: set[int] = set()
        self.records: dict[int, TrialRecord] = {}
        self.shutdown_sent = False

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
        return []

    def on_exited(self, request_id: int, reason: str) -> list[Action]:
        check_reason(reason)
        if request_id not in self.running:
            return []
        self.running.discard(request_id)
        self.records[request_id].status = exit_status(reason)
        return self._fill()

    def progress(self) -> float:
        if self.total == 0:
            return 1.0
        exited = len(self.records) - len(self.running)
        return min(1.0, exited / self.total)

    def trials(self) -> list[TrialRecord]:
        return [self.records[k] for k in sorted(self.records)]

    # -------------------------------------------------------------- internals
    def top_up(self) -> list[Action]:
        return self._fill() if self.records else []

    def _fill(self) -> list[Action]:
        actions: list[Action] = []
        while len(self.running) < self.concurrency and len(self.records) < self.total:
            actions.append(self._create())
        if not self.running and len(self.records) >= self.total and not self.shutdown_sent:
            self.shutdown_sent = True
            actions.append(Shutdown())
        return actions

    def _create(self) -> Create:
        rid = self.next_id
        self.next_id += 1
        hp = self._hparams(len(self.records))
        self.records[rid] = TrialRecord(request_id=rid, hparams=hp)
        self.running.add(rid)
        return Create(request_id=rid, hparams=hp, length=self.length,
                      validate_at=(self.length,))

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

    def restore(self, snapshot: dict[str, Any]) -> None:
        if snapshot.get("searcher") != self.name:
            raise ValueError(f"snapshot of {snapshot.get('searcher')!r} given to {self.name!r}")
        self.rng = sampling.rng_from_json(snapshot["rng"])
        self.next_id = int(snapshot["next_id"])
        self.running = {int(x) for x in snapshot["running"]}
        recs = [record_from_json(d) for d in snapshot["records"]]
        self.records = {r.request_id: r for r in recs}
        self.shutdown_sent = bool(snapshot["shutdown_sent"])


class RandomSearcher(PoolSearcher):
    """Determined's ``random``: ``max_trials`` sampled trials, ``max_concurrent_trials``
    at a time (0 = no limit)."""

    name = "random"

    def __init__(self, config: SearcherConfig, hparams: HParamTree, seed: int) -> None:
        if config.max_trials < 1:
            raise ConfigError([FieldError("searcher.max_trials", "must be >= 1")],
                              source="experiment config")
        super().__init__(config, hparams, seed, total=config.max_trials,
                         concurrency=config.max_concurrent_trials)
