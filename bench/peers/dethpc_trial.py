"""dethpc's trial in bench/peers: the shared CNN (``cnn.Trainer``) under dethpc's Core API.

Owns: one run of a dethpc trial, written as a dethpc user would write it
(docs/core-api.md): train to the searcher's length, report the validation loss at every
``cnn.EVERY`` batches, stop when the searcher or a preemption says so, checkpoint when
the run ends (the length reached, a stop or a preemption), resume from the latest
checkpoint.
Must not: be imported by dethpc; it runs as the experiment's ``train.py`` (with
``bench/peers`` on its PYTHONPATH, set by run.py through the experiment's
``environment.environment_variables``).
"""

from __future__ import annotations

import os

import cnn

import dethpc.core


def main() -> None:
    with dethpc.core.init() as ctx:
        curve = int(ctx.hparams["curve"])
        state = None
        latest = ctx.checkpoint.latest()
        if latest:
            with ctx.checkpoint.restore_path(latest) as p:
                state = (p / "state.bin").read_bytes()
        trainer = cnn.Trainer(curve, state)
        target = ctx.searcher.target_length or cnn.BUDGET
        trial = os.environ.get("DETHPC_TRIAL_ID", str(curve))

        def on_validation(length: int, loss: float) -> bool:
            cnn.record("dethpc", trial, curve, length, loss)
            ctx.train.report_validation_metrics(length, {"validation_loss": loss})
            return not ctx.preempt.should_preempt()

        trainer.train_to(target, on_validation, work=("dethpc", trial))
        with ctx.checkpoint.store_path({"steps_completed": trainer.batch}) as (path, _uuid):
            (path / "state.bin").write_bytes(trainer.save())


if __name__ == "__main__":
    main()
