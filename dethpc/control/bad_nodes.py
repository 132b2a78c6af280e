"""Bad nodes: the nodes on which an experiment's trials keep failing.

Owns: ``judge`` (pure: each node's runs, oldest first, to the nodes whose last
``failures`` judged runs all failed, the last within ``window_s``), ``node_runs`` (the
experiment's ended job rows as ``NodeRun`` records: a job row keeps its last run's
nodes, its exit reason and end, ``Job.nodes``/``exit_reason``/``ended_at``, from the
run's exit record), ``excluded`` (both, for one experiment, read from the store),
``exclude_option`` (the ``--exclude`` that adds them to what the pool and the
experiment already exclude) and ``exclusion`` (both: what the experiment's next sbatch,
trial jobs or a pool's workers, carries, and the note its event gets).
What counts: a run that ended in an error counts against each of its nodes; a run that
completed, was stopped by the searcher, or ran into its time limit clears them (the node
ran the trial's code); preemption, requeue, cancel and node failure say nothing about
the node's fitness and are skipped. docs/reliability.md, "Bad nodes".
Must not: drain, or otherwise change, a node: that is the admin's (``dethpc admin
check`` lists what dethpc excluded, where the site asks for it); import the ORM at
module level (``judge`` and ``node_runs`` serve the read path without it:
``dethpc.store.reader``'s rows, issue 47).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dethpc.common.exitcodes import ExitReason
from dethpc.common.sbatch_options import canonical_option, layer, option_value
from dethpc.config.model import BadNodes, ExperimentConfig, ResourcePool

if TYPE_CHECKING:
    from sqlmodel import Session

    from dethpc.store import Store
    from dethpc.store.models import Job

#: ends that count against a node, and ends that clear it; the rest say nothing
FAILED = frozenset({ExitReason.ERROR})
CLEARED = frozenset({ExitReason.COMPLETED, ExitReason.STOPPED, ExitReason.TIME_LIMIT})


@dataclass(frozen=True)
class NodeRun:
    """One ended run on one node."""

    node: str
    reason: ExitReason
    at: float
    trial_id: int
    job: str


@dataclass(frozen=True)
class BadNode:
    """A node left out of an experiment's later jobs, with the failed runs that did it."""

    node: str
    evidence: tuple[NodeRun, ...]   # the failures in a row, oldest first

    @property
    def last_at(self) -> float:
        return self.evidence[-1].at

    def summary(self) -> str:
        runs = ", ".join(f"trial {r.trial_id} job {r.job}" for r in self.evidence)
        return f"{self.node}: {len(self.evidence)} failed runs in a row ({runs})"


def judge(runs: Iterable[NodeRun], policy: BadNodes, now: float) -> list[BadNode]:
    """The nodes whose last ``policy.failures`` judged runs failed, the last of them
    within ``policy.window_s`` of ``now`` (sorted by name)."""
    if policy.failures <= 0:
        return []
    by_node: dict[str, list[NodeRun]] = {}
    for r in sorted(runs, key=lambda r: (r.at, r.job)):
        if r.reason in FAILED:
            by_node.setdefault(r.node, []).append(r)
        elif r.reason in CLEARED:
            by_node[r.node] = []
    return [BadNode(node, tuple(streak)) for node, streak in sorted(by_node.items())
            if len(streak) >= policy.failures and now - streak[-1].at <= policy.window_s]


def node_runs(jobs: Iterable[Job]) -> list[NodeRun]:
    """The ended job rows with nodes and an exit reason, one record per node."""
    return [NodeRun(node, job.exit_reason, job.ended_at, job.trial_id, job.ref or "")
            for job in jobs if job.exit_reason is not None and job.ended_at is not None
            for node in job.nodes.split(",") if node]


def excluded(s: Session, exp_id: int, policy: BadNodes, now: float) -> list[BadNode]:
    """``judge`` of experiment ``exp_id``'s ended jobs (one query; none when off)."""
    from sqlmodel import col, select

    from dethpc.store.models import Job

    if policy.failures <= 0:
        return []
    jobs = s.exec(select(Job).where(Job.experiment_id == exp_id, col(Job.ended_at).is_not(None),
                                    Job.nodes != ""))
    return judge(node_runs(jobs), policy, now)


def exclude_option(bad: Sequence[BadNode], *sbatch_args: Sequence[str]) -> str | None:
    """``--exclude=`` with the bad nodes added to the ``--exclude`` that the layered
    ``sbatch_args`` (the pool's, then the experiment's) already give; None: no bad node.
    On sbatch's command line it replaces the script's ``#SBATCH --exclude``, so it
    carries that one's nodes too."""
    if not bad:
        return None
    given: list[str] = []
    for arg in layer([], *sbatch_args):
        if canonical_option(arg) == "--exclude":
            given += [n for n in (option_value(arg) or "").split(",") if n]
    return "--exclude=" + ",".join(dict.fromkeys([*given, *(b.node for b in bad)]))


def exclusion(store: Store, exp_id: int, cfg: ExperimentConfig, pool: ResourcePool,
              now: float) -> tuple[str | None, str]:
    """The ``--exclude`` for experiment ``exp_id``'s next sbatch (None: no bad node)
    and what its event says of it ("with --exclude=...; n1: 2 failed runs in a row
    (...)"; "" without one)."""
    with store.session() as s:
        bad = excluded(s, exp_id, cfg.slurm.bad_nodes, now)
    option = exclude_option(bad, pool.sbatch_args, cfg.slurm.sbatch_args)
    if option is None:
        return None, ""
    return option, "; ".join([f"with {option}", *(b.summary() for b in bad)])
