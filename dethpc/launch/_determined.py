"""Determined's launcher entrypoints, run through dethpc's launchers.

Owns: the pure rule that rewrites an entrypoint written for Determined 0.38
(``python3 -m determined.launch.torch_distributed [OVERRIDES --] SCRIPT...``,
``determined.launch.deepspeed``, ``determined.launch.horovod``, with
``--trial module:Class`` or a script) into the dethpc launcher command that
does the same on Slurm, and the refusal, with the reason and the fix, of what
has no counterpart here (``determined.launch.tensorflow``, ``horovodrun`` flags).
Must not: run anything, or touch an argv that names no ``determined.launch``
module (every other entrypoint is left exactly as written).

What maps to what:

* ``determined.launch.torch_distributed`` -> ``dethpc.launch.torch_distributed``.
  Determined hands the overrides before ``--`` to ``torch.distributed.run``; so
  does dethpc in its ``torchrun`` mode, which is chosen when there are overrides
  (without overrides the default ``srun`` mode starts the same processes).
* ``determined.launch.deepspeed`` -> ``dethpc.launch.deepspeed`` (srun mode:
  one Slurm task per slot; DeepSpeed reads the torch-style rank variables).
* ``determined.launch.horovod`` -> ``dethpc.launch.horovod`` (Horovod over MPI
  under srun); its internal ``--autohorovod`` flag is dropped. Overrides are
  ``horovodrun`` flags, and dethpc does not use ``horovodrun``: refused.
* ``determined.launch.wrap_rank`` -> ``dethpc.launch.wrap_rank`` (the same options:
  a command with each output line prefixed by its rank).

``refusal(module)`` is the message of a ``determined.launch`` module that dethpc does not
run (also what ``python -m determined.launch.tensorflow`` prints inside a trial's job).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from dethpc.common.errors import SubmitError

PREFIX = "determined.launch."


class UnsupportedLauncher(SubmitError):
    """A Determined launcher (or its flags) that dethpc cannot run: bad input, exit 2
    (as ``check_supported``'s refusals of valid Determined values)."""

    exit_code = 2

MAPPED = {
    "torch_distributed": "dethpc.launch.torch_distributed",
    "deepspeed": "dethpc.launch.deepspeed",
    "horovod": "dethpc.launch.horovod",
    "wrap_rank": "dethpc.launch.wrap_rank",
}
#: Determined's launchers that dethpc does not run, and why
REFUSED = {
    "tensorflow": "dethpc has no TensorFlow launcher (TF_CONFIG for multi-worker "
                  "strategies is not built); run the script directly for one slot",
}


def _is_python(token: str) -> bool:
    name = os.path.basename(token)
    return name.startswith("python") and all(c.isdigit() or c == "." for c in name[6:])


def _launcher_at(argv: Sequence[str]) -> int | None:
    """Index of ``-m`` of the first ``python -m determined.launch.X``, else None."""
    for i in range(1, len(argv) - 1):
        if argv[i] == "-m" and argv[i + 1].startswith(PREFIX) and _is_python(argv[i - 1]):
            return i
    return None


def refusal(module: str) -> str | None:
    """Why ``determined.launch.<name>`` (``module``) cannot run on dethpc, and what to use
    instead; None for a launcher dethpc runs."""
    name = module[len(PREFIX):] if module.startswith(PREFIX) else module
    if name in MAPPED:
        return None
    why = REFUSED.get(name, f"Determined 0.38 has no launcher named {name!r}; its "
                             f"launchers are {', '.join(sorted(MAPPED))}")
    return (f"{PREFIX}{name} cannot run on dethpc: {why}. Use one of: "
            f"{', '.join(f'{PREFIX}{n}' for n in sorted(MAPPED))}, or a dethpc.launch module")


def from_determined(argv: Sequence[str]) -> list[str]:
    """``argv`` with its Determined launcher replaced by dethpc's (unchanged otherwise).

    Raises ``SubmitError`` for a Determined launcher that dethpc cannot run.
    """
    at = _launcher_at(argv)
    if at is None:
        return list(argv)
    module = argv[at + 1]
    name = module[len(PREFIX):]
    refused = refusal(module)
    if refused is not None:
        raise UnsupportedLauncher(f"entrypoint: {refused}")
    head, rest = list(argv[:at]), list(argv[at + 2:])
    if name == "horovod":
        rest = [t for t in rest if t != "--autohorovod"]
        if "--" in rest and rest.index("--") > 0:
            flags = " ".join(rest[: rest.index("--")])
            raise UnsupportedLauncher(
                f"entrypoint: the overrides before '--' ({flags}) are horovodrun flags; dethpc "
                "runs Horovod under srun without horovodrun. Set the matching HOROVOD_* "
                "variables in environment.environment_variables (e.g. --fusion-threshold-mb 1 "
                "-> HOROVOD_FUSION_THRESHOLD=1048576) and drop the overrides")
    if name == "torch_distributed" and "--" in rest and rest.index("--") > 0:
        rest = ["--mode", "torchrun", *rest]
    return [*head, "-m", MAPPED[name], *rest]
