"""Suite-wide test rules.

Owns: the CI rule for the Slurm tier. Tests marked ``slurm`` need the real dev
cluster (``scripts/devcluster up``). When it is not reachable they are skipped
with a one-line reason, except under ``CI=true``, where the Slurm tier is
mandatory and they FAIL. The cluster is probed once per session;
``DETHPC_TEST_START_CLUSTER=1`` (as root) lets the probe run ``up`` first.
"""

from __future__ import annotations

import os

import pytest

_UNPROBED = object()
_probe_result: object = _UNPROBED


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def slurm_unavailable() -> str | None:
    """Why the Slurm cluster cannot be used (probed once per session), or None."""
    global _probe_result
    if _probe_result is _UNPROBED:
        from dethpc.devcluster.probe import ensure_for_tests

        _probe_result = ensure_for_tests()
    return _probe_result  # type: ignore[return-value]


def _ci_message(reason: str) -> str:
    return (f"CI=true makes the Slurm tier mandatory, but {reason}. "
            "Start it with `sudo scripts/devcluster up`.")


def _skip_message(reason: str) -> str:
    return f"no Slurm cluster: {reason} (start it: sudo scripts/devcluster up)"


SLURM_FIXTURES = frozenset({"slurm_cluster", "slurm_required"})


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that uses a Slurm fixture is a Slurm test, wherever it lives."""
    for item in items:
        if SLURM_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slurm)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("slurm") is None:
        return
    reason = slurm_unavailable()
    if reason is None:
        return
    if not in_ci():
        pytest.skip(_skip_message(reason))
    message = _ci_message(reason)
    # Fail in the call phase, so the report says FAILED (not a setup ERROR).
    item.runtest = lambda: pytest.fail(message, pytrace=False)  # type: ignore[method-assign]


@pytest.fixture(scope="session")
def slurm_required() -> None:
    """Depend on this (or use the ``slurm`` marker) to need the Slurm cluster.

    Every test using it is marked ``slurm`` (above), so under CI the test itself
    FAILS through ``pytest_runtest_setup``; here only the local skip remains.
    """
    reason = slurm_unavailable()
    if reason is not None and not in_ci():
        pytest.skip(_skip_message(reason))


# ---------------------------------------------------------------- time per tier
#: seconds spent per tier (tests/<tier>/...), setup + call + teardown of every test
_tier_seconds: dict[str, float] = {}
_tier_counts: dict[str, int] = {}


def _tier(nodeid: str) -> str:
    parts = nodeid.split("/")
    return parts[1] if len(parts) > 2 and parts[0] == "tests" else "other"


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    tier = _tier(report.nodeid)
    _tier_seconds[tier] = _tier_seconds.get(tier, 0.0) + report.duration
    if report.when == "call":
        _tier_counts[tier] = _tier_counts.get(tier, 0) + 1


def pytest_terminal_summary(terminalreporter) -> None:  # type: ignore[no-untyped-def]
    """Print the time per tier, so each addition sees its cost against CI's budget
    (docs/testing.md: 45 minutes for `.ci/run` on 2 cores, set-up included)."""
    if not _tier_seconds:
        return
    tr = terminalreporter
    tr.write_sep("-", "time per tier (docs/testing.md keeps the budget)")
    for tier in sorted(_tier_seconds, key=lambda t: -_tier_seconds[t]):
        tr.write_line(f"{tier:>8}: {_tier_seconds[tier]:7.1f} s  "
                      f"({_tier_counts.get(tier, 0)} tests)")
    tr.write_line(f"{'total':>8}: {sum(_tier_seconds.values()):7.1f} s")
