"""Many new rows of one table in one statement, without an ORM object each.

Owns: ``insert_rows`` -- rows given as dicts of field values, completed with the model's
own field defaults (those its constructor would fill in) and inserted with one
executemany (SQLAlchemy's ORM bulk INSERT). Building a validated sqlmodel object per
row and flushing it through the unit of work was most of the daemon's cost for a
tick's metric lines and a batch's job rows (issue 47 item 2, bench/daemon_cost).
``insert_objects`` -- the same for rows whose objects the caller goes on with: INSERT ..
RETURNING gives them back as the session's persistent objects, ids assigned,
without the unit of work's flush (which first writes everything pending in the
session: a searcher's create flushed the whole tick so far, per trial).
Must not: decide which rows to write. ``insert_rows``' rows are not in the session's
identity map (a caller that needs a row's id or object uses ``insert_objects``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any, TypeVar

from sqlalchemy import insert
from sqlalchemy.orm import make_transient_to_detached
from sqlmodel import Session, SQLModel

M = TypeVar("M", bound=SQLModel)


@cache
def _defaults(model: type[SQLModel]) -> dict[str, Any]:
    """The fields with a default and whether it is a factory: (name -> FieldInfo).
    A primary key defaulting to None is left out (the database assigns it). Worked out
    once per model (the caller must not change the dict)."""
    table = model.__table__  # type: ignore[attr-defined]
    return {name: f for name, f in model.model_fields.items()
            if not f.is_required()
            and not (name in table.c and table.c[name].primary_key and f.default is None)}


def complete(model: type[SQLModel], row: Mapping[str, Any],
             defaults: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``row`` with the model's defaults for the fields it does not give (a factory
    called per row, as the constructor calls it)."""
    fields = defaults if defaults is not None else _defaults(model)
    out = {name: f.get_default(call_default_factory=True)
           for name, f in fields.items() if name not in row}
    out.update(row)
    return out


def insert_rows(s: Session, model: type[SQLModel], rows: Sequence[Mapping[str, Any]]) -> None:
    """Insert ``rows`` (dicts of field values) of ``model`` in ``s``'s transaction, in
    their order, with one statement. The session is not flushed first (a flush per
    call cost more than the insert): the rows must not refer to an object still
    pending in it."""
    if rows:
        fields = _defaults(model)
        s.execute(insert(model), [complete(model, row, fields) for row in rows],
                  execution_options={"autoflush": False})


def insert_objects(s: Session, model: type[M], rows: Sequence[Mapping[str, Any]]) -> list[M]:
    """Insert ``rows`` of ``model`` with INSERT .. RETURNING and return their objects, in
    the rows' order, persistent in ``s`` (later changes to them are flushed as any
    loaded row's). One statement per row on SQLite (its RETURNING promises no order;
    without RETURNING, before 3.35, the key from the cursor), one for them all on
    PostgreSQL (SQLAlchemy's insertmanyvalues). Nothing pending in
    the session is flushed first: the rows must not refer to an object still pending
    in it."""
    if not rows:
        return []
    fields = _defaults(model)
    full = [complete(model, row, fields) for row in rows]
    if s.get_bind().dialect.insert_returning:
        return list(s.scalars(insert(model).returning(model, sort_by_parameter_order=True),
                              full, execution_options={"autoflush": False}))
    return [_inserted(s, model, row) for row in full]


def _inserted(s: Session, model: type[M], row: dict[str, Any]) -> M:
    """One row inserted without RETURNING (SQLite before 3.35: RHEL 8's is 3.26), its key
    taken from the cursor, and its object, built as the constructor builds it, put in the
    session as that stored row (no flush, no read back)."""
    table = model.__table__  # type: ignore[attr-defined]
    key = s.connection().execute(table.insert().values(**row)).inserted_primary_key
    assert key is not None
    obj = model(**row)
    for column, value in zip(table.primary_key.columns, key, strict=True):
        setattr(obj, column.key, value)
    make_transient_to_detached(obj)
    s.add(obj)
    return obj
