"""The daemon process's garbage-collector settings.

Owns: ``settle`` -- called once by the process that runs the daemon's loop (``dethpc
daemon run``), after its modules are imported and before the first tick: what is
alive then (the imported modules, SQLAlchemy's and pydantic's class machinery, the
daemon's phases) is moved out of the collector's generations (``gc.freeze``), and the
youngest generation is collected every ``GEN0`` allocations instead of 700.
Must not: be called by a library function or a test process (it changes the whole
interpreter's collector), or turn the collector off (cycles still go).

Why (issue 47 item 2, bench/tick_scale): a tick at 10,000 trials allocates a few
hundred thousand short-lived objects (rows, parsed squeue lines); with the defaults the
collector ran its full collection over every object the process holds several times a
tick, ~100 ms of a 0.4 s tick. Measured in one run on the same store: a steady tick's
median 0.25-0.37 s with the defaults, 0.19-0.20 s frozen with the larger threshold.
The objects a tick keeps (the searcher held between ticks) stay collectable: only the
start-up heap is frozen.
"""

from __future__ import annotations

import gc

#: allocations (less deallocations) between two collections of the youngest generation
GEN0 = 20_000
#: collections of a generation between two of the next
GEN1 = GEN2 = 20


def settle() -> None:
    """Freeze the start-up heap and space the young collections (see the module)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(GEN0, GEN1, GEN2)
