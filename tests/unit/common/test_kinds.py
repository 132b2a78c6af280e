"""EventKind and MetricKind: the store's kind vocabularies (issue 46 item 3)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dethpc.common.exitcodes import ExitReason
from dethpc.common.kinds import EventKind, MetricKind

DETHPC = Path(__file__).resolve().parents[3] / "dethpc"


def test_every_exit_reason_is_an_event_kind() -> None:
    # a run's free exit is recorded as an event under its reason (reconcile/ingest.py)
    assert {r.value for r in ExitReason} <= {k.value for k in EventKind}


def test_metric_kinds_are_the_metrics_jsonl_kinds() -> None:
    assert [k.value for k in MetricKind] == ["training", "validation"]


@pytest.mark.parametrize("kind", list(EventKind) + list(MetricKind))
def test_a_kind_is_its_value_as_a_string(kind: EventKind | MetricKind) -> None:
    # what keeps the store's columns plain strings without a migration
    assert isinstance(kind, str) and kind == kind.value and f"{kind}" == kind.value


#: an event kind or metric kind written or queried as a bare string
_LITERAL = re.compile(r'(Event\(.*\bkind="|\.event\("|\bNote\("|'
                      r'(Event|Metric)\.kind == ")')


def test_no_kind_is_a_bare_string_literal() -> None:
    found = [f"{p.relative_to(DETHPC)}:{i}: {line.strip()}"
             for p in sorted(DETHPC.rglob("*.py"))
             for i, line in enumerate(p.read_text().splitlines(), 1)
             if _LITERAL.search(line)]
    assert not found, "use EventKind / MetricKind (dethpc.common.kinds):\n" + "\n".join(found)


def test_the_store_round_trips_a_kind_as_its_string(tmp_path: Path) -> None:
    from sqlmodel import select

    from dethpc.store import Store
    from dethpc.store.models import Event

    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    with store.session() as s:
        s.add(Event(experiment_id=1, kind=EventKind.LIMIT, message="m"))
    with store.session() as s:
        ev = s.exec(select(Event).where(Event.kind == EventKind.LIMIT)).one()
        assert ev.kind == EventKind.LIMIT and type(ev.kind) is str
