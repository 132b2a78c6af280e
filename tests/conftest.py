"""Suite-wide test rules.

Owns: the CI rule for the Slurm tier. Tests marked ``slurm`` need the real dev
cluster (``scripts/devcluster up``). When it is not reachable they are skipped
with a one-line reason, except under ``CI=true``, where the Slurm tier is
mandatory and they FAIL. The cluster is probed once per session.
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


def require_slurm() -> None:
    """Fail (CI) or skip (elsewhere) the current test when the cluster is unusable."""
    reason = slurm_unavailable()
    if reason is None:
        return
    if in_ci():
        pytest.fail(f"CI=true makes the Slurm tier mandatory, but {reason}. "
                    "Start it with `sudo scripts/devcluster up`.", pytrace=False)
    pytest.skip(f"no Slurm dev cluster: {reason} (start it: sudo scripts/devcluster up)")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("slurm") is not None:
        require_slurm()


@pytest.fixture(scope="session")
def slurm_required() -> None:
    """Depend on this (or use the ``slurm`` marker) to need the Slurm cluster."""
    require_slurm()
