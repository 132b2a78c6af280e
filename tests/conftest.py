"""Suite-wide test rules.

Owns: the CI rule for the Slurm tier. Tests marked ``slurm`` need the real dev
cluster (``scripts/devcluster up``). When it is not reachable they are skipped
with a one-line reason, except under ``CI=true``, where the Slurm tier is
mandatory and they FAIL. The cluster is probed once per session;
``DETHPC_TEST_START_CLUSTER=1`` (as root) lets the probe run ``up`` first.
"""

from __future__ import annotations

import os
from pathlib import Path

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
SLURM_DIR = Path(__file__).resolve().parent / "slurm"


#: the xdist work unit of every Slurm test: one worker runs them one after another (they
#: share the dev cluster's 4 nodes; preemption tests need them to themselves)
SLURM_LANE = "slurm"


def is_slurm_test(item: pytest.Item) -> bool:
    return (item.get_closest_marker("slurm") is not None
            or bool(SLURM_FIXTURES & set(getattr(item, "fixturenames", ())))
            or SLURM_DIR in Path(str(item.path)).resolve().parents)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that uses a Slurm fixture is a Slurm test, wherever it lives; the Slurm
    tests are collected first (under xdist, the Slurm lane starts at once)."""
    slurm, rest = [], []
    for item in items:
        if is_slurm_test(item):
            if SLURM_DIR not in Path(str(item.path)).resolve().parents:
                # the xdist lane is chosen by path (slurm_lane_scope): elsewhere this
                # test would run beside the Slurm tier on the shared cluster
                raise pytest.UsageError(f"{item.nodeid} needs the Slurm cluster; Slurm "
                                        "tests live under tests/slurm/")
            item.add_marker(pytest.mark.slurm)
            slurm.append(item)
        else:
            rest.append(item)
    items[:] = slurm + rest


def slurm_lane_scope(nodeid: str) -> str:
    """The xdist work unit of a test: every test under tests/slurm/ is one unit (one
    worker runs them in order), any other test is its own."""
    return SLURM_LANE if nodeid.startswith("tests/slurm/") else nodeid


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """``pytest -n 2 --dist loadgroup`` (scripts/test.sh): one worker runs the Slurm tier
    from the start while the other runs the unit, local and PostgreSQL tiers beside it
    (the Slurm tier mostly waits on the cluster: about half of the 2 cores is idle).
    The grouping is by path here, not by xdist's ``xdist_group`` marker: under pytest 9
    that marker no longer groups (xdist 3.8 renames ``item._nodeid``, which pytest 9
    does not read back)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SlurmLane(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return slurm_lane_scope(nodeid)

    return SlurmLane(config, log)  # type: ignore[arg-type]


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
