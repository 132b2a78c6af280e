"""Each experiment's run directory, read from its row once, for the daemon's per-tick
readers (the watch's refresh, the worker pools' item poll and cancel).

Owns: ``RunDirs`` (experiment id -> run directory): an experiment's run directory is set
when it is created and never changes, so one read of its row serves every later tick
(issue 47 item 2: both readers read the rows again each tick); an empty one (not set yet)
is answered but not kept.
Must not: write, or keep anything but run directories.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlmodel import col, select

from dethpc.store import Store
from dethpc.store.models import Experiment


class RunDirs:
    """The run directories of the experiments asked about, each read from the store once."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._known: dict[int, str] = {}

    def of(self, exp_ids: Iterable[int]) -> dict[int, str]:
        """``exp_ids``' run directories (an id with no row: absent); one read of the
        rows not known yet (``Store.read``: the tick's shared session inside a tick),
        none when all are."""
        ids = list(exp_ids)
        out = {e: self._known[e] for e in ids if e in self._known}
        missing = [e for e in ids if e not in out]
        if missing:
            with self.store.read() as s:
                for exp_id, run_dir in s.exec(select(Experiment.id, Experiment.run_dir)
                                              .where(col(Experiment.id).in_(missing))):
                    if exp_id is not None:
                        out[exp_id] = run_dir
                        if run_dir:   # kept once set
                            self._known[exp_id] = run_dir
        return out
