"""bench/peers_scale/target_trace: the chain of the trial that reached the target first."""

from __future__ import annotations

from datetime import datetime

from bench.peers_scale.target_trace import target_chain

T0 = datetime.fromisoformat("2026-12-02T12:00:00").timestamp()


def rec(run: str, event: str, wall: float, step: int = 0, **kw: object) -> dict[str, object]:
    return {"trial": f"tr-{run}", "run": run, "event": event, "step": step,
            "wall": T0 + wall, **kw}


def test_the_chain_of_the_first_validation_at_the_target() -> None:
    records = [
        rec("a", "start", 3.0, curve=1, container="40.0.g1"),
        rec("a", "ready", 13.0, seconds=10.0, container_s=5.0, cuda_s=5.0),
        rec("a", "step", 13.5, 1), rec("a", "validate", 14.0, 1, loss=0.5),
        rec("b", "start", 15.0, curve=85, container="40.0.g1"),
        rec("b", "ready", 20.0, seconds=5.0, container_s=0.0, cuda_s=5.0),
        rec("b", "step", 20.2, 1), rec("b", "validate", 26.0, 12, loss=0.01),
        rec("a", "validate", 30.0, 2, loss=0.001),     # later: not the first
    ]
    sacct = [{"JobIDRaw": "40", "Start": "2026-12-02T12:00:02"}]
    assert target_chain(records, sacct, T0, 0.0166) == {
        "trial": "tr-b", "run": "b", "curve": 85, "job": "40", "job_start_s": 2.0,
        "process_start_s": 15.0, "ready_s": 20.0, "container_s": 0.0, "cuda_s": 5.0,
        "first_step_s": 20.2, "target_s": 26.0, "target_step": 12, "restored": False}


def test_never_reached_and_an_old_log_without_its_job() -> None:
    assert target_chain([rec("a", "validate", 5.0, 1, loss=0.9)], [], T0, 0.0166) is None
    chain = target_chain([rec("a", "start", 1.0), rec("a", "validate", 5.0, 4, loss=0.01)],
                         [], T0, 0.0166)
    assert chain is not None and chain["job"] is None and chain["job_start_s"] is None
