"""``dethpc.control.rehearse`` for a trial in a pool worker: which worker holds it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dethpc.common.errors import DethpcError
from dethpc.control.rehearse import Rehearsal, Target, rehearse, worker_of
from dethpc.control.worker_pool_view import item_ref


def test_the_worker_that_holds_an_item_is_named_by_its_lease(tmp_path: Path) -> None:
    leases = tmp_path / "pool" / "leases"
    leases.mkdir(parents=True)
    (leases / "j812_3.4242--t7-s2.json").write_text("{}")
    (leases / "j812_1.99--t8-s1.json").write_text("{}")
    (leases / "login1.77--t9-s1.json").write_text("{}")     # a worker outside a job
    assert worker_of(tmp_path, item_ref(1, "t7-s2")) == "812_3"
    assert worker_of(tmp_path, item_ref(1, "t8-s1")) == "812_1"
    assert worker_of(tmp_path, item_ref(1, "t7-s1")) is None     # an earlier item
    assert worker_of(tmp_path, "812_3") is None                  # not an item ref
    assert worker_of(tmp_path, item_ref(1, "t9-s1")) is None


def test_a_pool_trials_time_limit_is_refused_before_anything_is_sent(tmp_path: Path) -> None:
    class Untouched:
        def __getattr__(self, name: str) -> Any:
            raise AssertionError(f"{name} called")

    target = Target(experiment_id=1, trial_id=7, ref="812_3", run=-1, signal="USR2",
                    grace_s=30, trial_dir=tmp_path, pooled=True)
    with pytest.raises(DethpcError, match="runs in a pool worker.*without --time-limit"):
        rehearse(Untouched(), Untouched(), [target], Rehearsal.TIME_LIMIT)  # type: ignore[arg-type]
    assert not (tmp_path / "rehearsal.json").exists()
