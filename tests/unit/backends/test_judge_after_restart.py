"""``slurm_submit.judge`` after a slurmctld restart: a refusal is asked again while nodes
register and for ``SETTLE_S`` after, never without a restart going on (a scripted sbatch
and sinfo, a fake clock: the real restart is tests/slurm/test_multifault_slurm.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dethpc.backends import slurm_submit as ss
from dethpc.backends.base import JobRequest
from dethpc.common.runner import CommandResult

REFUSED = ("sbatch: error: Batch job submission failed: Requested node configuration is "
           "not available")


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def monotonic(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


class Cluster:
    """``sbatch --test-only`` answers from ``accepts(t)``; ``sinfo`` says UNKNOWN while
    ``registering(t)``; each command takes 0.2 s."""

    def __init__(self, clock: Clock, accepts: Any, registering: Any) -> None:
        self.clock, self.accepts, self.registering = clock, accepts, registering
        self.tries = 0

    def run(self, argv: list[str], **_: Any) -> CommandResult:
        self.clock.t += 0.2
        if argv[0] == "sinfo":
            out = "unknown\nidle\n" if self.registering(self.clock.t) else "idle\nidle\n"
            return CommandResult(tuple(argv), 0, out, "")
        self.tries += 1
        ok = self.accepts(self.clock.t)
        return CommandResult(tuple(argv), 0 if ok else 1, "", "" if ok else REFUSED)


CASES = [
    # (what, accepts from t, registering until t, verdict None?, test-only tries at most)
    ("no restart, a real refusal: believed at once", 1e9, 0.0, False, 1),
    ("nodes register at 4 s, accepted at once", 4.0, 4.0, True, 20),
    ("accepted 3 s after the last node registered", 7.0, 4.0, True, 30),
    ("still refused 5 s after registering: believed", 1e9, 4.0, False, 30),
    ("nodes never register: believed at REGISTER_WAIT_S", 1e9, 1e9, False, 70),
]


@pytest.mark.parametrize("what,accept_t,register_t,accepted,tries", CASES)
def test_judge_after_restart(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, what: str,
                             accept_t: float, register_t: float, accepted: bool,
                             tries: int) -> None:
    clock = Clock()
    monkeypatch.setattr(ss.time, "monotonic", clock.monotonic)
    monkeypatch.setattr(ss.time, "sleep", clock.sleep)
    cluster = Cluster(clock, lambda t: t >= accept_t, lambda t: t < register_t)
    request = JobRequest(name="n", comment="c", script=tmp_path / "j.sh", workdir=tmp_path)
    verdict = ss.judge(cluster, request, lambda: 1001)  # type: ignore[arg-type]
    assert (verdict is None) is accepted, what
    if not accepted:
        assert verdict is not None and "node configuration is not available" in verdict
    assert cluster.tries <= tries, what
    assert clock.t <= ss.REGISTER_WAIT_S + 2, what
