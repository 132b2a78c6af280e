"""Stops land at the rung (``PreemptContext.await_verdict``, docs/searchers.md "Stop
latency"): a trial that reports a validation at an ASHA rung waits for the searcher's
verdict before its next step, so every trial ASHA stops there ends with exactly the
rung's steps, none trained past it. Local backend, the real daemon and toy trial.

Without the wait (``DETHPC_VERDICT_WAIT_S=0``, checked by hand when this was written:
stopped trials ended at 9, 9, 11 and 13 steps) the stop travels while the trial trains on.
"""

from __future__ import annotations

import json

from tests.local.conftest import TOY, cli, write_config

RUNG, LENGTH = 8, 32


def test_every_trial_asha_stops_at_a_rung_ends_at_that_rung(home, tmp_path):
    cfg = write_config(
        tmp_path / "c.yaml",
        hyperparameters={"x": {"type": "double", "minval": 0, "maxval": 6},
                         "step_time": 0.05},
        searcher={"name": "adaptive_asha", "metric": "validation_loss", "max_trials": 8,
                  "max_concurrent_trials": 4, "divisor": 4, "max_rungs": 2,
                  "mode": "aggressive", "max_length": {"batches": LENGTH}},
        # a bound no loaded machine reaches: the verdict, not the bound, ends each wait
        environment={"environment_variables": ["DETHPC_VERDICT_WAIT_S=120"]})
    exp = json.loads(cli("submit", cfg, TOY, "--json").stdout)["id"]
    cli("experiment", "wait", exp, "--timeout", "240", timeout=260)
    d = json.loads(cli("experiment", "describe", exp, "--json").stdout)
    assert d["state"] == "COMPLETED", d
    stopped = [t for t in d["trials"] if t["searcher_status"] == "stopped"]
    assert stopped, [(t["id"], t["searcher_status"], t["steps_completed"]) for t in d["trials"]]
    assert sorted(t["steps_completed"] for t in stopped) == [RUNG] * len(stopped), \
        [(t["id"], t["state"], t["steps_completed"]) for t in d["trials"]]
    assert {t["state"] for t in stopped} == {"STOPPED"}
    others = [t for t in d["trials"] if t["searcher_status"] != "stopped"]
    assert others and all(t["steps_completed"] == LENGTH for t in others), others
