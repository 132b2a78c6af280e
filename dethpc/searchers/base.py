"""The ``Searcher`` protocol: events in, actions out, JSON snapshot/restore.

Owns: the action types (``Create``, ``Stop``, ``Continue``, ``Shutdown``),
the abstract ``Searcher``, and the small helpers every searcher shares: the exit
reasons ``on_exited`` accepts (``check_reason``: ``dethpc.common.exitcodes.TrialExit``,
the vocabulary the reconciler tells), a record's ``TrialStatus``, ``target_length``,
a trial's ``target.json`` (``target_document``) and ``TrialRecord`` <-> JSON (the
snapshot form, which the store keeps: do not rename its keys or the enums' values; a
record is saved with its status's value and an old snapshot's status string is read
back as the member of that value).
Searchers are pure: no I/O, no clock, no global RNG (each keeps a
``random.Random`` seeded from ``reproducibility.experiment_seed`` and snapshots
its state), so a daemon restarted mid-search makes identical decisions.

Identity: a searcher names trials by ``request_id`` (ints it hands out, from 1).
The daemon maps request ids to trial rows. Lengths are in the unit of
``searcher.max_length`` (e.g. batches); 0 = no length, the training code decides.
"""

from __future__ import annotations

import abc
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from dethpc.common.errors import ConfigError, FieldError
from dethpc.common.exitcodes import TrialExit
from dethpc.config import searcher_registry as registry
from dethpc.config.model import SearcherConfig


class TrialStatus(StrEnum):
    """What a searcher shows of one of its trials (``TrialRecord.status``; ``experiment
    describe``, the ASHA plot). Snapshots hold the values: do not rename them."""

    ACTIVE = "active"
    STOPPED = "stopped"          # stopped early (lost at a rung, or its own early exit)
    PROMOTED = "promoted"        # went on to the next rung
    COMPLETED = "completed"
    ERRORED = "errored"
    INVALID = "invalid"          # raised det.InvalidHP


@dataclass(frozen=True)
class Create:
    """Start a new trial that trains to ``length`` and validates at each of ``validate_at``."""

    request_id: int
    hparams: dict[str, Any]
    length: int
    validate_at: tuple[int, ...] = ()


@dataclass(frozen=True)
class Continue:
    """Resume an exited trial from its latest checkpoint and train on to ``length``
    (the promotion variant of ASHA)."""

    request_id: int
    length: int
    validate_at: tuple[int, ...] = ()


@dataclass(frozen=True)
class Stop:
    """Ask a live trial to checkpoint and exit: it lost at a rung."""

    request_id: int


@dataclass(frozen=True)
class Shutdown:
    """The search is over: no trial will be created or continued any more."""


Action = Create | Continue | Stop | Shutdown


@dataclass
class TrialRecord:
    """What a searcher may want to show about one of its trials (``experiment describe``)."""

    request_id: int
    hparams: dict[str, Any]
    bracket: int = 0
    rung: int = 0                # highest rung reached
    status: TrialStatus = TrialStatus.ACTIVE
    metrics: dict[int, float] = field(default_factory=dict)  # length -> metric


def trial_length(config: SearcherConfig) -> int:
    """A full trial's length in its unit, or 0: no ``max_length`` (Determined 0.38), the
    trial runs until its training code ends (``Trainer.fit(max_length=...)`` or the
    Core API loop returns) and gets no ``target.json``."""
    return config.max_length.value if config.max_length is not None else 0


def target_document(config: SearcherConfig, length: int,
                    validate_at: Iterable[int]) -> dict[str, Any]:
    """A trial's ``target.json``: ``length`` and ``validate_at`` in the unit of
    ``searcher.max_length``, and ``fit_length_wins`` (the searcher's
    ``SearcherSpec.fit_length_wins``: the trial's own ``fit(max_length=...)`` decides its
    length, as Determined 0.38's; absent or false: ``length`` caps it)."""
    unit = config.max_length.unit.value if config.max_length else "batches"
    spec = registry.find(config.name)
    return {"unit": unit, "length": length, "validate_at": list(validate_at),
            "fit_length_wins": bool(spec is not None and spec.fit_length_wins)}


def target_length(config: SearcherConfig) -> int:
    """``searcher.max_length`` in its unit; a ``ConfigError`` when it is missing."""
    if config.max_length is None or config.max_length.value < 1:
        raise ConfigError(
            [FieldError("searcher.max_length",
                        "required and >= 1, e.g. `max_length: {batches: 1000}`")],
            source="experiment config",
        )
    return config.max_length.value


def check_reason(reason: str) -> TrialExit:
    """``reason`` as a ``TrialExit``; ``ValueError`` for one that is not."""
    try:
        return TrialExit(reason)
    except ValueError:
        allowed = ", ".join(r.value for r in TrialExit)
        raise ValueError(f"unknown exit reason {reason!r}; allowed: {allowed}") from None


def exit_status(reason: TrialExit) -> TrialStatus:
    """TrialRecord status for a trial that exited with ``reason`` unasked."""
    return {TrialExit.COMPLETED: TrialStatus.COMPLETED, TrialExit.ERRORED: TrialStatus.ERRORED,
            TrialExit.INVALID_HP: TrialStatus.INVALID}.get(reason, TrialStatus.STOPPED)


#: the snapshot text's separators (compact, as the store keeps it)
SNAPSHOT_SEPARATORS = (",", ":")


def record_to_json(r: TrialRecord) -> dict[str, Any]:
    return {"request_id": r.request_id, "hparams": r.hparams, "bracket": r.bracket,
            "rung": r.rung, "status": r.status.value,
            "metrics": [[length, m] for length, m in sorted(r.metrics.items())]}


def record_from_json(d: dict[str, Any]) -> TrialRecord:
    return TrialRecord(request_id=int(d["request_id"]), hparams=d["hparams"],
                       bracket=int(d["bracket"]), rung=int(d["rung"]),
                       status=TrialStatus(str(d["status"])),
                       metrics={int(k): float(v) for k, v in d["metrics"]})


class Searcher(abc.ABC):
    """Base class of all searchers."""

    name: str = "abstract"

    @abc.abstractmethod
    def initial(self) -> list[Action]:
        """Actions at experiment start (typically ``Create`` x min(max_concurrent, max_trials))."""

    @abc.abstractmethod
    def on_validation(self, request_id: int, metric: float, length: int) -> list[Action]:
        """A trial reported a validation ``metric`` after training ``length`` units."""

    @abc.abstractmethod
    def on_exited(self, request_id: int, reason: str) -> list[Action]:
        """A trial exited for good. ``reason``: a ``TrialExit`` (or its value): completed
        (reached its length), stopped, errored, cancelled, invalid_hp or
        user_requested_stop; ``check_reason`` refuses any other. For the
        promotion variant, a trial that completed a rung exits with ``completed`` and may
        be continued later."""

    @abc.abstractmethod
    def progress(self) -> float:
        """Fraction of the search done, in [0, 1]."""

    @abc.abstractmethod
    def snapshot(self) -> dict[str, Any]:
        """JSON-serializable state, including RNG state."""

    def snapshot_text(self, extra: Mapping[str, Any]) -> str:
        """``snapshot()`` with ``extra``'s keys after its own, as compact JSON text (what
        the store keeps): ``json.dumps({**snapshot(), **extra}, separators=(",", ":"))``,
        character for character. A searcher may build the same text cheaper
        (``IndependentSearcher`` keeps each record's encoding)."""
        return json.dumps({**self.snapshot(), **extra}, separators=SNAPSHOT_SEPARATORS)

    @abc.abstractmethod
    def restore(self, snapshot: dict[str, Any]) -> None:
        """Load a state produced by ``snapshot`` (on the same config)."""

    @abc.abstractmethod
    def trials(self) -> list[TrialRecord]:
        """Per-trial view for ``experiment describe`` (rungs, stopped/promoted)."""

    def top_up(self) -> list[Action]:
        """Trials to create now because ``max_concurrent_trials`` may have grown
        (``dethpc experiment set-concurrency``). Default: none; the searcher uses
        its configured concurrency at its next event."""
        return []

    def rungs(self) -> list[dict[str, Any]]:
        """Rung lengths and cut-offs, for describe/preview (empty for non-ASHA)."""
        return []
