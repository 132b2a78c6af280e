"""The daemon's job-name tag of its database (dethpc.jobs.jobscript.instance_tag)."""

from __future__ import annotations

import hashlib

import pytest

from dethpc.jobs.jobscript import instance_tag


def _old(url: str) -> str:
    return hashlib.sha256(url.encode()).hexdigest()[:6]


@pytest.mark.parametrize("url", [
    "sqlite:////home/ada/.dethpc/dethpc.db",
    "sqlite:///relative.db",
    "postgresql+psycopg://ada@db.example.org:5432/dethpc",      # no password
    "not a url at all",
])
def test_urls_without_a_password_keep_the_tag_they_always_had(url: str) -> None:
    assert instance_tag(url) == _old(url)


def test_a_rotated_password_keeps_the_tag() -> None:
    a = instance_tag("postgresql+psycopg://ada:old-secret@db:5432/dethpc")
    b = instance_tag("postgresql+psycopg://ada:n%40w-secret@db:5432/dethpc")
    assert a == b
    assert a != _old("postgresql+psycopg://ada:old-secret@db:5432/dethpc")


@pytest.mark.parametrize("other", [
    "postgresql+psycopg://ada:pw@db:5432/other",        # another database
    "postgresql+psycopg://bob:pw@db:5432/dethpc",       # another user
    "postgresql+psycopg://ada:pw@db2:5432/dethpc",      # another server
    "sqlite:////home/ada/.dethpc/dethpc.db",
])
def test_other_databases_get_other_tags(other: str) -> None:
    assert instance_tag(other) != instance_tag("postgresql+psycopg://ada:pw@db:5432/dethpc")
