"""The stop-latency bench's trial: a torch-free paced trial on dethpc.core.

hparams: x (the optimum is x=3; the loss ranks trials), step_time (seconds per step).
Environment ``STOPLAT_CHECK_S``: the stop check interval (default dethpc's own).
Writes ``stoplat.json`` in its trial directory when it leaves its loop: the wall time
each validation was written (after ``report_validation_metrics`` returned, i.e. the
line is on disk), the time it left (after its stop checkpoint), the step it reached
and why it left (``stop``, ``pause``, ``signal`` or ``completed``).
"""

import json
import os
import time
from pathlib import Path

import dethpc.core

interval = os.environ.get("STOPLAT_CHECK_S")
extra = {"stop_check_interval_s": float(interval)} if interval else {}
with dethpc.core.init(**extra) as ctx:  # type: ignore[arg-type]
    hp = ctx.hparams
    trial_dir = Path(os.environ.get("DETHPC_TRIAL_DIR", "."))
    target = ctx.searcher.target_length or 10
    validate_at = sorted(set(ctx.searcher.validate_at) | {target})
    x = float(hp.get("x", 1.0))
    step_time = float(hp.get("step_time", 0.1))
    step, validations, reason = 0, [], "completed"

    def save(s: int) -> None:
        with ctx.checkpoint.store_path({"steps_completed": s}) as (path, _uuid):
            (path / "state.json").write_text(json.dumps({"step": s}))

    while step < target:
        time.sleep(step_time)
        step += 1
        if step in validate_at:
            loss = (x - 3) ** 2 + 1.0 / step
            ctx.train.report_validation_metrics(step, {"validation_loss": loss})
            validations.append([step, time.time()])
        if ctx.preempt.should_preempt():
            save(step)
            reason = ctx.preempt.reason or "stop"
            break
    (trial_dir / "stoplat.json").write_text(json.dumps({
        "validations": validations, "exit_time": time.time(), "step": step,
        "reason": reason, "validate_at": validate_at, "target": target}))
