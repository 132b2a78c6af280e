"""The searcher's target for this trial, read from ``target.json``.

Owns: ``SearcherContext`` (``target_length``, ``unit``, ``validate_at`` and a
Determined-style ``operations()`` iterator yielding one ``SearcherOperation``),
``DummySearcherContext`` (off-cluster: no target unless one is given), and Determined's
``SearcherContextMissing`` and ``DummySearcherOperation``.
An operation's progress is recorded through the train context's ``report_progress``
(handed in by ``core.init``), never written here.
Must not: talk to the daemon (the searcher metric reaches it through the
validation records in metrics.jsonl), import torch, or write files.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dethpc.common.errors import DethpcError
from dethpc.core._distributed import DistributedContext
from dethpc.core._info import read_json_object

log = logging.getLogger(__name__)

UNITS = ("batches", "epochs", "records")


class SearcherMode(enum.Enum):
    """Determined's (deprecated) ``SearcherMode``; every rank reads the same target.json
    here, so both modes behave alike."""

    WorkersAskChief = "WORKERS_ASK_CHIEF"
    ChiefOnly = "CHIEF_ONLY"


class Unit(enum.Enum):
    EPOCHS = "EPOCHS"
    RECORDS = "RECORDS"
    BATCHES = "BATCHES"


@dataclass(frozen=True)
class Target:
    """``{"unit": "batches", "length": 400, "validate_at": [25, 100, 400],
    "fit_length_wins": false}``."""

    unit: str
    length: int
    validate_at: tuple[int, ...] = ()
    #: the trial's own ``Trainer.fit(max_length=...)`` decides its length, longer or
    #: shorter than ``length`` (single, random, grid, as Determined 0.38's: there
    #: ``length`` is the legacy ``searcher.max_length``, the length of a ``fit`` without
    #: one); false (ASHA; a target.json without the key): ``length`` caps it
    fit_length_wins: bool = False

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], source: str = "target.json") -> Target:
        unit = raw.get("unit", "batches")
        length = raw.get("length")
        validate_at = raw.get("validate_at") or []
        if unit not in UNITS:
            raise DethpcError(f"{source}: unit {unit!r} is not one of {', '.join(UNITS)}")
        if isinstance(length, bool) or not isinstance(length, int) or length < 1:
            raise DethpcError(f"{source}: length must be an int >= 1, got {length!r}")
        if not isinstance(validate_at, list) or not all(
                isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in validate_at):
            raise DethpcError(f"{source}: validate_at must be a list of ints > 0, "
                              f"got {validate_at!r}")
        wins = raw.get("fit_length_wins", False)
        if not isinstance(wins, bool):
            raise DethpcError(f"{source}: fit_length_wins must be true or false, got {wins!r}")
        return cls(unit=unit, length=length, validate_at=tuple(sorted(set(validate_at))),
                   fit_length_wins=wins)

    @classmethod
    def read(cls, path: Path) -> Target:
        return cls.from_dict(read_json_object(path, "searcher target"), str(path))


#: as Determined, the chief's loop over operations() fails when the body did not complete
#: its operation (a ``break`` out of the loop does not)
NOT_COMPLETED = ("the searcher operation ended without op.report_completed(searcher_metric): "
                 "call it on the chief (rank 0) before the next iteration of operations()")

#: what a searcher operation's progress is recorded with: the train context's
#: ``report_progress`` (a fraction in [0, 1]), or nothing (the dummy logs it)
ProgressSink = Callable[[float], None]


@dataclass
class SearcherOperation:
    """Train to ``length`` (in ``unit``), reporting progress; one per trial run.

    As Determined's: only the chief reports (``is_chief``), and ``report_progress``
    records ``length / self.length`` clipped to [0, 1] as the trial's progress (through
    ``progress``, the train context's ``report_progress``: a progress line in
    metrics.jsonl, where Determined posts it to its master)."""

    length: int
    unit: str
    is_chief: bool = True
    progress: ProgressSink | None = field(default=None, repr=False)
    _progress: float = 0.0
    _completed: bool = False
    _metric: Any = field(default=None, repr=False)

    def _check_chief(self, call: str) -> None:
        if not self.is_chief:
            raise DethpcError(f"op.{call}() is the chief's (rank 0) call; call it there only, "
                              "as in Determined")

    def report_progress(self, length: float) -> None:
        """How far training got, in the operation's unit (the chief only)."""
        self._check_chief("report_progress")
        if self._completed and length != self.length:
            raise DethpcError("op.report_progress() after op.report_completed() may only "
                              f"report the full length ({self.length}), not {length}")
        if length < self._progress:
            log.debug("searcher progress went back from %s to %s", self._progress, length)
        self._progress = float(length)
        fraction = min(1.0, max(0.0, length / self.length))
        if self.progress is None:
            log.info("searcher progress: %s/%s", length, self.length)
        else:
            self.progress(fraction)

    def report_completed(self, searcher_metric: Any) -> None:
        """Mark the operation done (the chief only). The daemon reads the metric from the
        validation records in metrics.jsonl; this only checks that it is reported once."""
        self._check_chief("report_completed")
        if self._completed:
            raise DethpcError("report_completed() called twice for the same operation")
        self._completed = True
        self._metric = searcher_metric

    @property
    def completed(self) -> bool:
        return self._completed


class SearcherContext:
    """The trial's target; ``target_length`` is None when there is none (off-cluster)."""

    def __init__(self, target: Target | None, dist: DistributedContext | None = None,
                 progress: ProgressSink | None = None) -> None:
        self.target = target
        self._dist = dist or DistributedContext()
        self._progress_sink = progress

    @property
    def target_length(self) -> int | None:
        return self.target.length if self.target else None

    @property
    def unit(self) -> str:
        return self.target.unit if self.target else "batches"

    @property
    def validate_at(self) -> tuple[int, ...]:
        return self.target.validate_at if self.target else ()

    def operations(self, searcher_mode: SearcherMode = SearcherMode.WorkersAskChief,
                   auto_ack: bool = True) -> Iterator[SearcherOperation]:
        """Yield the single operation (train to the target length), like Determined 0.38,
        which fabricates one operation of ``searcher.max_length`` (deprecated there)."""
        SearcherMode(searcher_mode)
        del auto_ack
        if self.target is None:
            raise DethpcError("this trial has no searcher target: the experiment config has no "
                              "searcher.max_length (deprecated in Determined 0.38). Set the "
                              "training length in your code instead and do not call "
                              "core_context.searcher.operations(), e.g. "
                              "Trainer.fit(max_length=Batch(100))")
        op = SearcherOperation(length=self.target.length, unit=self.target.unit,
                               is_chief=self._dist.rank == 0, progress=self._progress_sink)
        yield op
        if not op.completed and self._dist.rank == 0:   # only the chief reports (Determined)
            raise DethpcError(NOT_COMPLETED)

    def acknowledge_out_of_ops(self) -> None:
        """Determined ignores this call since 0.38; so does dethpc."""

    def get_configured_units(self) -> Unit | None:
        """The unit of ``searcher.max_length`` (None when it was a bare number)."""
        if self.target is None:
            raise DethpcError("this trial has no searcher target: the experiment config has no "
                              "searcher.max_length")
        return Unit[self.target.unit.upper()]


class DummySearcherOperation(SearcherOperation):
    """Determined's ``DummySearcherOperation(length, is_chief)``: an operation of
    ``length`` batches whose progress is logged (off-cluster there is nothing to record
    it in); only the chief may report, as in Determined."""

    def __init__(self, length: int, is_chief: bool = True) -> None:
        super().__init__(length=length, unit="batches", is_chief=is_chief)


class SearcherContextMissing(SearcherContext):
    """Determined's searcher context of a trial without ``searcher.max_length``: every
    call says so (the same message as ``SearcherContext`` without a target)."""

    def __init__(self, dist: DistributedContext | None = None) -> None:
        super().__init__(None, dist)


class DummySearcherContext(SearcherContext):
    """Off-cluster twin, built as Determined's: ``DummySearcherContext(dist, length=1)``;
    ``operations()`` then yields one operation of ``length`` batches. dethpc's own
    keyword ``target=`` gives it a searcher target instead (tests, rehearsals)."""

    def __init__(self, dist: DistributedContext | None = None, length: int = 1, *,
                 target: Target | None = None) -> None:
        if dist is not None and not isinstance(dist, DistributedContext):
            raise DethpcError(f"DummySearcherContext(dist, length=1): dist must be a "
                              f"DistributedContext, got {type(dist).__name__} (a target "
                              "is passed as target=)")
        super().__init__(target, dist)
        self._length = length

    def operations(self, searcher_mode: SearcherMode = SearcherMode.WorkersAskChief,
                   auto_ack: bool = True) -> Iterator[SearcherOperation]:
        if self.target is not None:
            yield from super().operations(searcher_mode, auto_ack)
            return
        SearcherMode(searcher_mode)
        op = DummySearcherOperation(self._length, self._dist.rank == 0)
        yield op
        if not op.completed and self._dist.rank == 0:   # only the chief reports (Determined)
            raise DethpcError(NOT_COMPLETED)

    def get_configured_units(self) -> Unit | None:
        # Determined's Dummy answers EPOCHS whatever its operation's length (the searcher
        # is deprecated with its units; a program reads them to convert lengths)
        return super().get_configured_units() if self.target is not None else Unit.EPOCHS
