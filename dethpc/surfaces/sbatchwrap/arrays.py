"""sbatch's ``--array`` value: which task ids a job array has.

Owns: ``parse_array`` (``0-9``, ``1,3,5-7``, ``0-15:4``, ``%N`` throttle, as sbatch
22.05 accepts them; ``ArraySpec``) so ``dethpc sbatch`` records one trial per task
before it submits.
Must not: read options or submit anything.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from dethpc.common.errors import DethpcError

_RANGE = re.compile(r"^(\d+)(?:-(\d+)(?::(\d+))?)?$")


class ArraySpecError(DethpcError):
    exit_code = 2


@dataclass(frozen=True)
class ArraySpec:
    """The task ids of an ``--array`` value and its throttle."""

    indices: tuple[int, ...]
    #: ``%N``: at most N tasks at once (0: no limit)
    throttle: int = 0


def parse_array(value: str, max_array_size: int = 1001) -> ArraySpec:
    """The task ids of ``--array=value`` in ascending order, without duplicates.
    ``max_array_size``: Slurm's MaxArraySize (ids must be below it)."""
    text = value.strip()
    throttle = 0
    if "%" in text:
        text, _, limit = text.partition("%")
        if not limit.isdigit():
            raise ArraySpecError(f"--array={value}: the part after % must be a whole "
                                 f"number of tasks at once, got {limit!r}")
        throttle = int(limit)
    if not text:
        raise ArraySpecError(f"--array={value}: no task ids; allowed: 0-9, 1,3,5-7, 0-15:4, "
                             "each optionally followed by %N")
    ids: set[int] = set()
    for part in text.split(","):
        m = _RANGE.match(part.strip())
        if m is None:
            raise ArraySpecError(f"--array={value}: {part!r} is not a task id or range; "
                                 "allowed: N, N-M, N-M:STEP (comma-separated), then %N")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        step = int(m.group(3)) if m.group(3) is not None else 1
        if hi < lo or step < 1:
            raise ArraySpecError(f"--array={value}: {part!r} is an empty range")
        ids.update(range(lo, hi + 1, step))
    too_big = [i for i in ids if i >= max_array_size]
    if too_big:
        raise ArraySpecError(f"--array={value}: task id {max(too_big)} is not below the "
                             f"cluster's MaxArraySize ({max_array_size})")
    return ArraySpec(indices=tuple(sorted(ids)), throttle=throttle)
