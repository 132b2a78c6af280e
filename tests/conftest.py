"""Suite-wide test rules.

Owns: the CI rule for the Slurm tier. Tests marked ``slurm`` need the real dev
cluster (``scripts/devcluster up``). When it is not reachable they are skipped
with a one-line reason, except under ``CI=true``, where the Slurm tier is
mandatory and they FAIL. The cluster is probed once per session (per xdist worker);
``DETHPC_TEST_START_CLUSTER=1`` (as root) lets the probe run ``up`` first.
Also the Slurm lanes under ``pytest -n N --dist loadgroup``: which worker runs which
lane, binding a worker to its lane's dev cluster before any test runs, the xdist
scheduler that hands Slurm test files only to lane workers (a lane of Debian's release
takes the next file as it runs low), and the time per tier and per lane.
It also sets ``DETHPC_DETECT=0`` for the session (no config means local, as the tests
expect; docs/config.md#cluster-config) and ``DETHPC_CATCH_UP=0`` (a CLI view must not
judge jobs beside the in-process daemon a test ticks; docs/existing-scripts.md).
Must not: pick which file a lane takes next (tests/slurm_lanes.py does).
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any

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


def _which_cluster() -> str:
    lane = os.environ.get("DETHPC_DEVCLUSTER_LANE", "1")
    return f"lane {lane}'s, SLURM_CONF={os.environ.get('SLURM_CONF', '/etc/slurm/slurm.conf')}"


def _ci_message(reason: str) -> str:
    return (f"CI=true makes the Slurm tier mandatory, but {reason} ({_which_cluster()}). "
            "Start it with `sudo scripts/devcluster up`.")


def _skip_message(reason: str) -> str:
    return (f"no Slurm cluster: {reason} ({_which_cluster()}; start it: "
            "sudo scripts/devcluster up)")


SLURM_FIXTURES = frozenset({"slurm_cluster", "slurm_required"})
SLURM_DIR = Path(__file__).resolve().parent / "slurm"


#: the xdist work unit of Slurm lane k is LANE_SCOPE + str(k): one worker, bound to lane k's
#: dev cluster, runs its tests one after another (they share that cluster's 4 nodes;
#: preemption, node-crash and limit tests need them to themselves)
LANE_SCOPE = "slurm-lane-"
#: the work unit of one Slurm test file (its tests for Debian's release), which any lane of
#: that release may take (it starts with LANE_SCOPE: no other worker takes it)
FILE_SCOPE = LANE_SCOPE + "file:"
#: xdist's ``workerinput`` key of a worker's Slurm lane (0: no lane, the other tiers)
LANE_KEY = "slurm_lane"


def is_slurm_test(item: pytest.Item) -> bool:
    return (item.get_closest_marker("slurm") is not None
            or bool(SLURM_FIXTURES & set(getattr(item, "fixturenames", ())))
            or SLURM_DIR in Path(str(item.path)).resolve().parents)


#: the releases beside Debian's whose cluster also runs the version-spanning tests
#: (``spanning`` marker), one lane each (scripts/test.sh sets it when their cluster is up)
SPANNING_ENV = "DETHPC_SPANNING_RELEASES"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--slurm-lanes", type=int, default=None,
        help="xdist workers that run the Slurm tier, each on its own dev cluster (lane 1..N; "
             "default $DETHPC_DEVCLUSTER_LANES, else 3; at most -n). Only with "
             "--dist loadgroup.")
    parser.addoption(
        "--slurm-releases", default=None,
        help="Slurm releases beside 22.05 (comma-separated, e.g. 25.11) on which the "
             "version-spanning tests (marker `spanning`) also run: each test once per "
             f"release, one more lane (and worker) per release (default ${SPANNING_ENV}).")


def slurm_lanes(config: pytest.Config) -> int:
    from dethpc.devcluster.lanes import lane_count

    return lane_count(config.getoption("slurm_lanes"))


def spanning_releases(config: pytest.Config) -> list[Any]:
    """The releases beside the default one that run the spanning tests too."""
    from dethpc.devcluster.releases import DEFAULT_RELEASE, SlurmRelease

    raw = config.getoption("slurm_releases")
    raw = os.environ.get(SPANNING_ENV, "") if raw is None else raw
    out = [SlurmRelease.parse(w) for w in raw.split(",") if w.strip()]
    return [r for r in dict.fromkeys(out) if r is not DEFAULT_RELEASE]


def slot_cluster(config: pytest.Config, slot: int) -> tuple[Any, int]:
    """(release, lane) of a worker's lane slot: 1..N are the default release's lanes
    1..N, N+1.. one lane of each spanning release."""
    from dethpc.devcluster.releases import DEFAULT_RELEASE

    n = slurm_lanes(config)
    if slot <= n:
        return DEFAULT_RELEASE, slot
    return spanning_releases(config)[slot - n - 1], 1


def release_of_nodeid(nodeid: str) -> str | None:
    """The release a spanning test's variant runs on (its ``slurm-X.Y`` id), else None."""
    params = nodeid.rsplit("::", 1)[-1].partition("[")[2]
    m = re.search(r"(?:^|-)slurm-(\d+\.\d+)(?:-|\]$)", params)
    return m.group(1) if m else None


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A ``spanning`` test runs once per release: on Debian's (the default lanes) and on
    each ``--slurm-releases`` one (its own lane)."""
    if metafunc.definition.get_closest_marker("spanning") is None:
        return
    extra = spanning_releases(metafunc.config)
    if not extra:
        return
    from dethpc.devcluster.releases import DEFAULT_RELEASE

    values = [DEFAULT_RELEASE.value, *(r.value for r in extra)]
    metafunc.parametrize("slurm_release", values, indirect=True,
                         ids=[f"slurm-{v}" for v in values])


@pytest.fixture(autouse=True)
def slurm_release(request: pytest.FixtureRequest) -> str | None:
    """The release a spanning test's variant is for; a variant of another release than
    this process's cluster is skipped (under xdist the scheduler never sends it here)."""
    want = getattr(request, "param", None)
    if want is None:
        return None
    from dethpc.devcluster.lanes import current_release

    bound = current_release().value
    if want != bound:
        pytest.skip(f"the Slurm {want} variant; this process is bound to Slurm {bound} "
                    f"(run it with DETHPC_DEVCLUSTER_SLURM={want})")
    return str(want)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Bind this process to its lane's dev cluster before any test runs: an xdist worker
    to the lane the controller gave it (none: the worker runs the other tiers only), a
    run without xdist to ``$DETHPC_DEVCLUSTER_LANE`` (default 1). Binding exports the
    lane's ``SLURM_CONF`` (every Slurm command, and every job, then talks to that
    cluster), ``DETHPC_DEVCLUSTER_LANE`` and ``DETHPC_DEVCLUSTER_NODES``."""
    from dethpc.devcluster.lanes import current_lane, current_release, lane_env, lane_layout

    # no test (and no process a test starts) probes Slurm to build a config it did not
    # write: a dev cluster up on this host would turn every config-less CLI call into a
    # Slurm one. The zero-config tests set DETHPC_DETECT=1 themselves.
    os.environ["DETHPC_DETECT"] = "0"
    # nor does a CLI view read and judge jobs when no daemon process runs: most tests
    # tick an in-process daemon the view cannot see (test_catch_up_slurm sets it to 1)
    os.environ["DETHPC_CATCH_UP"] = "0"
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        slot = int(workerinput.get(LANE_KEY, 0))
        if not slot:
            return
        release, lane = slot_cluster(config, slot)
    elif getattr(config.option, "dist", "no") != "no" \
            and getattr(config.option, "numprocesses", None):
        return  # the xdist controller runs no test
    else:
        release, lane = current_release(), current_lane()
    os.environ.update(lane_env(lane_layout(lane, release=release)))


_lane_of_node: dict[object, int] = {}


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: object) -> None:
    """(xdist controller) Give a starting worker the lowest lane no live worker holds,
    or 0 once every lane has one (a replacement for a crashed worker gets its lane)."""
    config = node.config  # type: ignore[attr-defined]
    if config.getvalue("dist") != "loadgroup":
        return
    held = set(_lane_of_node.values())
    slots = slurm_lanes(config) + len(spanning_releases(config))
    lane = next((k for k in range(1, slots + 1) if k not in held), 0)
    _lane_of_node[node] = lane
    node.workerinput[LANE_KEY] = lane  # type: ignore[attr-defined]


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: object, error: object) -> None:
    _lane_of_node.pop(node, None)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that uses a Slurm fixture is a Slurm test, wherever it lives; the Slurm
    tests are collected first (under xdist, the Slurm lanes start at once)."""
    slurm, rest = [], []
    for item in items:
        if is_slurm_test(item):
            if SLURM_DIR not in Path(str(item.path)).resolve().parents:
                # the xdist lane is chosen by path (SlurmLanes): elsewhere this test
                # would run beside the Slurm lanes on a cluster it was not bound to
                raise pytest.UsageError(f"{item.nodeid} needs the Slurm cluster; Slurm "
                                        "tests live under tests/slurm/")
            item.add_marker(pytest.mark.slurm)
            slurm.append(item)
        else:
            rest.append(item)
    items[:] = slurm + rest


def slurm_file(nodeid: str) -> str | None:
    """The test file of a Slurm test's node id, None for any other test."""
    return nodeid.split("::", 1)[0] if nodeid.startswith("tests/slurm/") else None


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """``pytest -n N --dist loadgroup`` (scripts/test.sh): the Slurm tier runs in lanes.
    Each of the first ``--slurm-lanes`` workers is bound to its own dev cluster of
    Debian's release (``pytest_configure_node``, ``pytest_configure``); each Slurm test
    file is a work unit of its own, and a lane's worker that runs low takes the longest
    file left (``tests.slurm_lanes.next_file``, by tests/slurm/durations.json), so the
    lanes end together whatever the load does to their pace (a static plan left one lane
    running alone for 5 minutes at the end: CI, stop 46). A spanning test's variant for
    another release is its release lane's (one unit, that lane's worker). Every other
    test is its own work unit, handed to whichever worker runs low (the other workers from
    the start, a lane's worker once no Slurm file is left for it). The grouping is by path
    here, not by xdist's ``xdist_group`` marker: under pytest 9 that marker no longer
    groups (xdist 3.8 renames ``item._nodeid``, which pytest 9 does not read back)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    from tests.slurm_lanes import DEFAULT_S, next_file, read_durations

    n = slurm_lanes(config)
    extra_slot = {r.value: n + 1 + i for i, r in enumerate(spanning_releases(config))}

    class SlurmLanes(LoadScopeScheduling):
        durations: dict[str, float] | None = None

        def _split_scope(self, nodeid: str) -> str:
            f = slurm_file(nodeid)
            if f is None:
                return nodeid
            release = release_of_nodeid(nodeid)
            if release in extra_slot:  # a spanning test's variant for another release
                return f"{LANE_SCOPE}{extra_slot[release]}"
            return f"{FILE_SCOPE}{f}"

        def schedule(self) -> None:
            if self.collection is None and self.durations is None:
                self.durations = read_durations()
                collection = next(iter(self.registered_collections.values()))
                files = {f for nodeid in collection if (f := slurm_file(nodeid))
                         and release_of_nodeid(nodeid) not in extra_slot}
                total = sum(self.durations.get(f, DEFAULT_S) for f in files)
                self.log(f"Slurm files: {len(files)}, estimated {total:.0f} s for {n} lanes")
                _plan.update(lanes=n, estimated_s=total)
            super().schedule()

        def _next_scope(self, lane: int) -> str | None:
            if 1 <= lane <= n:   # a lane of Debian's release: the longest file left
                f = next_file([s.removeprefix(FILE_SCOPE) for s in self.workqueue
                               if s.startswith(FILE_SCOPE)], self.durations or {})
                if f is not None:
                    return f"{FILE_SCOPE}{f}"
            elif lane and f"{LANE_SCOPE}{lane}" in self.workqueue:
                return f"{LANE_SCOPE}{lane}"
            # never a Slurm unit on a worker not bound to its cluster
            return next((s for s in self.workqueue if not s.startswith(LANE_SCOPE)), None)

        def _assign_work_unit(self, node: Any) -> None:
            scope = self._next_scope(_lane(node))
            if scope is None:
                return
            work_unit = self.workqueue.pop(scope)
            self.assigned_work.setdefault(node, {})[scope] = work_unit
            collection = self.registered_collections[node]
            node.send_runtest_some([collection.index(nodeid)
                                    for nodeid, done in work_unit.items() if not done])
            if not self.workqueue:  # idle workers wait for nothing more
                for other in self.nodes:
                    if not other.shutting_down and not self._pending_of(
                            self.assigned_work[other]):
                        other.shutdown()

    return SlurmLanes(config, log)  # type: ignore[arg-type]


def _lane(node: Any) -> int:
    return int(getattr(node, "workerinput", {}).get(LANE_KEY, 0))


#: for the summary: the lanes of Debian's release and the files' estimated seconds
_plan: dict[str, Any] = {}


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


#: per Slurm lane (xdist controller): tests, their seconds, when the last one ended
_lane_tests: dict[int, int] = {}
_lane_files: dict[int, set[str]] = {}
_lane_seconds: dict[int, float] = {}
_lane_end: dict[int, float] = {}
_session_start = time.monotonic()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    tier = _tier(report.nodeid)
    _tier_seconds[tier] = _tier_seconds.get(tier, 0.0) + report.duration
    if report.when == "call":
        _tier_counts[tier] = _tier_counts.get(tier, 0) + 1
    lane = _lane(getattr(report, "node", None))
    if lane and slurm_file(report.nodeid):
        _lane_seconds[lane] = _lane_seconds.get(lane, 0.0) + report.duration
        _lane_end[lane] = time.monotonic() - _session_start
        if report.when == "call":
            _lane_tests[lane] = _lane_tests.get(lane, 0) + 1
            _lane_files.setdefault(lane, set()).add(report.nodeid.split("::")[0])


def pytest_terminal_summary(terminalreporter) -> None:  # type: ignore[no-untyped-def]
    """Print the time per tier and per Slurm lane, so each addition sees its cost
    against CI's budget (docs/testing.md: 25 minutes for `.ci/run` on 2 cores, set-up
    included)."""
    if not _tier_seconds:
        return
    tr = terminalreporter
    tr.write_sep("-", "time per tier (docs/testing.md keeps the budget)")
    for tier in sorted(_tier_seconds, key=lambda t: -_tier_seconds[t]):
        tr.write_line(f"{tier:>8}: {_tier_seconds[tier]:7.1f} s  "
                      f"({_tier_counts.get(tier, 0)} tests)")
    tr.write_line(f"{'total':>8}: {sum(_tier_seconds.values()):7.1f} s")
    if not _lane_end:
        return
    from dethpc.devcluster.lanes import lane_layout

    tr.write_sep("-", "Slurm lanes (one worker and one dev cluster each)")
    if _plan.get("lanes"):
        tr.write_line(f"  durations.json estimated {_plan['estimated_s']:.0f} s of Debian's "
                      f"release's files for {_plan['lanes']} lanes, taken longest first")
    for lane in sorted(_lane_end):
        files = len(_lane_files.get(lane, ()))
        release, k = slot_cluster(terminalreporter.config, lane)
        lay = lane_layout(k, release=release)
        planned = ("files taken as it ran low" if lane <= _plan.get("lanes", 0)
                   else "release variants")
        tr.write_line(
            f"  lane {lane} (Slurm {release.value}, {lay.slurm_conf}): {_lane_tests.get(lane, 0)} "
            f"tests in {files} files, {_lane_seconds[lane]:7.1f} s of tests "
            f"({planned}), last one ended {_lane_end[lane]:7.1f} s after the start")
