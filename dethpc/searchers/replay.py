"""What a searcher was told, as one line each, and replaying it into a fresh searcher.

Owns: ``SearcherCall`` (one call the daemon made: ``initial``, ``on_validation``,
``on_exited`` or ``top_up``, with its arguments), its one-line text form
(``format_call`` / ``parse_call``: the message of an ``Event`` of kind
``EVENT_KIND``, which the reconciler records in the transaction that feeds the
searcher), ``invoke`` (make the call on a searcher) and ``replay`` (every call in
order on a fresh searcher: the actions it returns are the decisions the daemon took,
and its snapshot the state the store holds, however many times the daemon was killed
and restored its searcher from the snapshot in between).
Must not: do I/O or know the store (callers read the events and build the searcher
through the registry); metric values round-trip exactly (``repr`` of the float).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from dethpc.common.kinds import EventKind
from dethpc.searchers.base import Action, Searcher, check_reason

#: ``Event.kind`` of the events that record searcher calls
EVENT_KIND = EventKind.SEARCHER


class CallKind(StrEnum):
    INITIAL = "initial"
    VALIDATION = "validation"
    EXITED = "exited"
    TOP_UP = "top_up"


@dataclass(frozen=True)
class SearcherCall:
    kind: CallKind
    request_id: int = 0
    metric: float = 0.0
    length: int = 0
    reason: str = ""


def initial() -> SearcherCall:
    return SearcherCall(CallKind.INITIAL)


def top_up() -> SearcherCall:
    return SearcherCall(CallKind.TOP_UP)


def validation(request_id: int, metric: float, length: int) -> SearcherCall:
    return SearcherCall(CallKind.VALIDATION, request_id, float(metric), int(length))


def exited(request_id: int, reason: str) -> SearcherCall:
    return SearcherCall(CallKind.EXITED, request_id, reason=check_reason(reason))


def format_call(call: SearcherCall) -> str:
    """``validation request=3 length=9 metric=0.25``, ``exited request=3 reason=stopped``,
    ``initial``, ``top_up``."""
    match call.kind:
        case CallKind.VALIDATION:
            return (f"validation request={call.request_id} length={call.length} "
                    f"metric={call.metric!r}")
        case CallKind.EXITED:
            return f"exited request={call.request_id} reason={call.reason}"
    return call.kind.value


def parse_call(text: str) -> SearcherCall:
    """The inverse of ``format_call``; ``ValueError`` naming the bad line otherwise."""
    head, *words = text.split()
    try:
        fields = dict(w.split("=", 1) for w in words)
        kind = CallKind(head)
        if kind == CallKind.VALIDATION:
            return validation(int(fields["request"]), float(fields["metric"]),
                              int(fields["length"]))
        if kind == CallKind.EXITED:
            return exited(int(fields["request"]), fields["reason"])
    except (KeyError, ValueError) as exc:
        raise ValueError(f"not a searcher call: {text!r} ({exc})") from exc
    if fields:
        raise ValueError(f"not a searcher call: {text!r} ({head} takes no arguments)")
    return SearcherCall(kind)


def invoke(searcher: Searcher, call: SearcherCall) -> list[Action]:
    """Make ``call`` on ``searcher``; the actions it returns."""
    match call.kind:
        case CallKind.INITIAL:
            return searcher.initial()
        case CallKind.VALIDATION:
            return searcher.on_validation(call.request_id, call.metric, call.length)
        case CallKind.EXITED:
            return searcher.on_exited(call.request_id, call.reason)
        case CallKind.TOP_UP:
            return searcher.top_up()
    raise ValueError(f"unknown searcher call {call.kind!r}")


def replay(searcher: Searcher, calls: Iterable[SearcherCall]) -> list[Action]:
    """Every call in order on ``searcher`` (a fresh one, same config and seed); all the
    actions it returned, in order."""
    actions: list[Action] = []
    for call in calls:
        actions += invoke(searcher, call)
    return actions
