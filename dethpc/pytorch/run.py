"""``python -m dethpc.pytorch.run module:TrialClass``: run a Trial class as an entrypoint.

Owns: importing the trial class (from the working directory, normally the
context snapshot), building it inside ``dethpc.pytorch.init()`` and calling
``Trainer.fit`` (for a ``DeepSpeedTrial``, ``dethpc.pytorch.deepspeed``'s two);
``DethpcError``s become a one-line message and exit code.
Must not: parse the experiment config (Trainer reads the periods it needs).
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import logging
import os
import sys
from collections.abc import Sequence

from dethpc.common.errors import DethpcError
from dethpc.common.jobenv import ENV_CONTEXT_DIR, ENV_LOG_LEVEL


def load_trial_class(spec: str) -> type:
    """``"model_def:DigitsTrial"`` -> the class (module imported from the context dir)."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise DethpcError(f"entrypoint {spec!r} is not of the form module:TrialClass")
    for folder in (os.environ.get(ENV_CONTEXT_DIR), os.getcwd()):
        if folder and folder not in sys.path:
            sys.path.insert(0, folder)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise DethpcError(f"cannot import {module_name!r} for entrypoint {spec!r}: {exc}") \
            from exc
    obj: object = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise DethpcError(f"module {module_name!r} has no {attr!r} (entrypoint {spec!r})")
        obj = getattr(obj, part)
    from dethpc.pytorch._trial import PyTorchTrial

    if inspect.isclass(obj) and (issubclass(obj, PyTorchTrial) or _is_deepspeed_trial(obj)):
        return obj
    raise DethpcError(f"entrypoint {spec!r} is not a subclass of dethpc.pytorch.PyTorchTrial "
                      "or dethpc.pytorch.deepspeed.DeepSpeedTrial")


def _is_deepspeed_trial(cls: type) -> bool:
    """A ``DeepSpeedTrial`` subclass (its module is loaded only when the trial's is)."""
    module = sys.modules.get("dethpc.pytorch._deepspeed")
    return module is not None and issubclass(cls, module.DeepSpeedTrial)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dethpc.pytorch.run",
                                     description="Run a PyTorchTrial class under dethpc.")
    parser.add_argument("trial", help="module:TrialClass, e.g. model_def:DigitsTrial")
    parser.add_argument("--max-length", type=int, default=None,
                        help="batches to train when there is no searcher target (off-cluster)")
    parser.add_argument("--test", action="store_true",
                        help="test mode: 1 batch, a short validation, 1 checkpoint")
    args = parser.parse_args(argv)
    logging.basicConfig(level=os.environ.get(ENV_LOG_LEVEL, "INFO"),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        trial_cls = load_trial_class(args.trial)
        if _is_deepspeed_trial(trial_cls):
            from dethpc.pytorch._deepspeed import Trainer, init
        else:
            from dethpc.pytorch._init import init  # type: ignore[assignment]
            from dethpc.pytorch._trainer import Trainer  # type: ignore[assignment]
        with init() as context:
            trial = trial_cls(context)
            Trainer(trial, context).fit(max_length=args.max_length,
                                        test_mode=True if args.test else None)
    except DethpcError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
