"""The Slurm backend: jobs go to slurmctld through the Slurm CLI (or pyslurm for polls).

Owns: ``SlurmBackend`` — the ``Backend`` protocol over Slurm, as a thin shell that
hands each operation to the module that owns it: site facts read once
(``slurm_site``: ``scontrol show config``, ``sinfo``, QoS, the user's per-user limits),
submission (``slurm_submit``: ``sbatch`` and its refusals), the batched poll and
``find`` (``slurm_poll``: ``squeue``, ``sacct`` only for refs that left the queue,
``sdiag``, the pyslurm fast path) and actions on jobs (``slurm_actions``: ``scancel``,
``scontrol requeue/update``). Every operation is O(1) commands whatever the number of
refs. With a ``user``, the poll's one squeue lists all of that user's jobs
(``--user``, not ``--jobs``): the same one RPC, and what per-user limits count
(``user_jobs``). ``docs/backends.md`` lists each operation's commands.
Must not: build command lines, parse text or keep caches itself (the modules above
do), run commands except through the ``CommandRunner`` it was given, or loop per job.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from dethpc.backends import slurm_submit
from dethpc.backends.base import JobAction, JobInfo, JobRequest, PoolLimits
from dethpc.backends.slurm_actions import (
    action_argv,
    cancel_argv,
    launched_steps,
    run_tolerant,
    steps_argv,
    throttle_argv,
)
from dethpc.backends.slurm_parse import Partition
from dethpc.backends.slurm_poll import SlurmPoll
from dethpc.backends.slurm_ratelimit import RpcPacer, parse_rate_limit, subject_to_limit
from dethpc.backends.slurm_site import SlurmSite, slurm_up
from dethpc.backends.slurm_site_cache import SiteCache
from dethpc.common.errors import CommandError
from dethpc.common.jobref import JobRef
from dethpc.common.runner import CommandRunner
from dethpc.common.traits import SLURM, BackendTraits


class SlurmBackend:
    """``Backend`` over the Slurm CLI; see the module docstring."""

    name = "slurm"
    traits: BackendTraits = SLURM

    def __init__(self, runner: CommandRunner, user: str | None = None,
                 signal_flags: Sequence[str] = ("--batch",),
                 site_cache: SiteCache | None = None) -> None:
        self.runner = runner
        self.user = user
        #: extra scancel flags with a signal: by default the batch shell alone, where
        #: every dethpc job's ``--signal=B:`` has Slurm send its early signal (and where
        #: its traps forward it to the step); ("--full",) would signal the steps too
        self.signal_flags = tuple(signal_flags)
        #: the site's facts, each asked once; ``site_cache`` (also set later as
        #: ``site.cache``, as the CLI does) keeps them across this user's processes
        #: (``slurm_site_cache``; None: this process asks for each once)
        self.site = SlurmSite(runner, user, cache=site_cache)
        self._poll = SlurmPoll(runner, user, self.site)
        #: waits before Slurm commands where slurmctld rate-limits this user's RPCs
        #: (set from the site's config before the first job command: ``_paced``)
        if not isinstance(runner.pacer, RpcPacer):
            runner.pacer = RpcPacer()
        self.pacer: RpcPacer = runner.pacer
        self._pace_known = False

    @property
    def limits_retry_s(self) -> float:
        """Seconds between reads of the user's limits while sacctmgr fails."""
        return self.site.limits_retry_s

    @limits_retry_s.setter
    def limits_retry_s(self, value: float) -> None:
        self.site.limits_retry_s = value

    # ------------------------------------------------------------ discovery
    def available(self) -> bool:
        return slurm_up(self.runner)

    def config(self) -> dict[str, str]:
        """``scontrol show config``'s fields dethpc reads, as a dict (``SlurmSite``)."""
        return self.site.config()

    def max_array_size(self) -> int:
        return self.site.max_array_size()

    def accounting_enabled(self) -> bool:
        """True unless ``AccountingStorageType`` is none (or sacct said so)."""
        return self.site.accounting_enabled()

    def partitions(self) -> dict[str, Partition]:
        return self.site.partitions()

    def check_pool(self, partition: str | None, qos: str | None, nodes: int,
                   tasks_per_node: int, gpus_per_node: int) -> None:
        self.site.check_pool(partition, qos, nodes, tasks_per_node, gpus_per_node)

    def job_limits(self, partition: str | None, qos: str | None, account: str | None,
                   extra_args: Sequence[str] = ()) -> PoolLimits:
        """The user's per-user limits (``SlurmSite.job_limits``: two sacctmgr on the
        first call, none after; read again ``limits_retry_s`` after they failed)."""
        return self.site.job_limits(partition, qos, account, extra_args)

    def user_jobs(self) -> list[JobInfo] | None:
        """Every job (array task) of the user that the last poll's squeue listed, or
        None when this backend has no user (its poll then lists only dethpc's jobs)."""
        return self._poll.user_jobs()

    def _paced(self) -> None:
        """Before the first job command: read the site's config (once; a failed read is
        tried again at the next command) and pace this process's Slurm commands to its
        per-user RPC rate limit, when slurmctld has one for this user
        (``slurm_ratelimit``)."""
        if self._pace_known:
            return
        try:
            cfg = self.site.config()
        except CommandError:
            return
        self._pace_known = True
        self.pacer.configure(parse_rate_limit(cfg) if subject_to_limit(cfg, os.geteuid())
                             else None)

    # --------------------------------------------------------------- submit
    def judge(self, request: JobRequest) -> str | None:
        """Slurm's verdict without submitting (``slurm_submit.judge``)."""
        self._paced()
        return slurm_submit.judge(self.runner, request, self.max_array_size)

    def submit(self, request: JobRequest) -> list[JobRef]:
        self._paced()
        return slurm_submit.submit(self.runner, request, self.max_array_size)

    # ---------------------------------------------------------- poll / find
    def poll(self, refs: Sequence[str]) -> dict[str, JobInfo]:
        """One squeue, at most one sacct and one sdiag (``SlurmPoll.poll``)."""
        self._paced()
        return self._poll.poll(refs)

    def find(self, names: Sequence[str]) -> list[JobInfo]:
        """Tasks named ``names``: one squeue, plus one sacct (``SlurmPoll.find``)."""
        self._paced()
        return self._poll.find(names)

    # -------------------------------------------------------------- actions
    def cancel(self, refs: Sequence[str], signal: str | None = None) -> None:
        """One ``scancel`` (an array's tasks in one bracket form: ``cancel_argv``)."""
        if refs:
            self._paced()
            run_tolerant(self.runner, cancel_argv(refs, signal, self.signal_flags))
            if signal is None:
                self._poll.note_cancelled(refs)

    def signal_steps(self, refs: Sequence[str], signal: str) -> None:
        """``scancel --signal=SIG ref ...``: without ``--batch`` or ``--full`` Slurm
        signals every step of the job and spares its batch shell. KILL goes to each
        launched step by its id (``squeue --steps`` first): KILL to a job id cancels the
        job, and its KillWait's SIGKILL would take the batch shell too."""
        if not refs:
            return
        self._paced()
        if signal.upper().removeprefix("SIG") not in ("KILL", "9"):
            run_tolerant(self.runner, cancel_argv(refs, signal, ()))
            return
        steps = launched_steps(self.runner.run(steps_argv(refs), check=False).stdout)
        if steps:
            self._paced()
            run_tolerant(self.runner, cancel_argv(steps, "KILL", ()))

    def act(self, refs: Sequence[str], action: JobAction) -> None:
        if refs:
            self._paced()
            run_tolerant(self.runner, action_argv(refs, action))

    def set_throttle(self, array_job_id: str, limit: int) -> None:
        self._paced()
        run_tolerant(self.runner, throttle_argv(array_job_id, limit))
