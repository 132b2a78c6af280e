"""The trial of bench/asha/e2e.py: a recorded learning curve replayed in a real job.

Owns: what one trial run does on the dev cluster: ``import torch`` (the real start
cost), then replays curve ``hparams['curve']`` of ``curves.json`` (next to this file in
the experiment's context): it sleeps the recorded training seconds between
validations and the recorded validation seconds at each, reports the recorded
validation loss at every ``period`` batches and at the searcher's ``validate_at``,
checkpoints (a real ``torch.save``) at each validation and resumes from the latest
(a real ``torch.load``), checks the stop/preempt file at least every 0.1 s, and
appends ``{"t": wall time, "length", "loss"}`` to ``$DETHPC_TRIAL_DIR/e2e.jsonl``.
Must not: be imported (it runs as a trial's ``train.py``).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import torch

import dethpc.core

HERE = Path(__file__).resolve().parent
TICK_S = 0.1


def main() -> None:
    raw = json.loads((HERE / "curves.json").read_text())
    period = int(raw["meta"]["max_length"]) // 16
    with dethpc.core.init() as ctx:
        curve = raw["curves"][int(ctx.hparams["curve"])]
        lengths: list[int] = curve["lengths"]
        trial_dir = Path(os.environ.get("DETHPC_TRIAL_DIR", "."))
        target = ctx.searcher.target_length or lengths[-1]
        points = sorted({v for v in ctx.searcher.validate_at if v <= target}
                        | set(range(period, target + 1, period)) | {target})
        step = 0
        latest = ctx.checkpoint.latest()
        if latest:
            with ctx.checkpoint.restore_path(latest) as p:
                step = int(torch.load(p / "state.pt")["step"])

        def at(length: int) -> tuple[float, float]:
            i = min(range(len(lengths)), key=lambda k: abs(lengths[k] - length))
            return float(curve["val_loss"][i]), float(curve["train_seconds"][i])

        done = at(step)[1] if step else 0.0
        for length in (v for v in points if v > step):
            loss, spent = at(length)
            deadline = time.monotonic() + max(0.0, spent - done) + float(curve["val_seconds"])
            while (left := deadline - time.monotonic()) > 0:
                time.sleep(min(TICK_S, left))
                if ctx.preempt.should_preempt():
                    return
            done, step = spent, length
            ctx.train.report_validation_metrics(step, {"validation_loss": loss})
            with (trial_dir / "e2e.jsonl").open("a") as f:
                f.write(json.dumps({"t": time.time(), "length": step, "loss": loss}) + "\n")
            with ctx.checkpoint.store_path({"steps_completed": step}) as (path, _uuid):
                torch.save({"step": step}, path / "state.pt")
            if ctx.preempt.should_preempt():
                return


if __name__ == "__main__":
    main()
