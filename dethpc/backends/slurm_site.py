"""What a Slurm site is like, asked once per backend: its config, partitions, QoS and
the user's per-user job limits.

Owns: ``SlurmSite`` — ``scontrol show config`` (``MaxArraySize``,
``AccountingStorageType``), ``sinfo``'s partitions, the QoS names (one ``sacctmgr``),
whether the cluster is in a federation (``local_only``: one ``scontrol show
federation``) and the user's per-user limits (two ``sacctmgr``), each fetched on first
use and cached for the instance's life; the limits are read again ``limits_retry_s``
after sacctmgr failed. Given a ``SiteCache`` (``slurm_site_cache``), the config's fields
dethpc reads, the partitions and the federation answer are first looked up there and
kept there once asked, so that the user's next process (the daemon a submit starts, the
next submit) asks slurmctld nothing for them while slurm.conf is the same (issue 48); a
pool that kept partitions refuse is checked against a live ``sinfo`` before refusing.
Whether accounting is on: the config's word, or sacct's (``no_accounting``, learnt by
the poll). ``check_pool``: the pool's partition and
QoS exist and its allocation fits. Pure pieces with table tests: ``array_limit``,
``accounting_on``, ``federated``, ``check_partition``, ``check_qos``, ``limits_due``;
and ``slurm_up`` (``available``).
Must not: parse Slurm's text itself (``slurm_parse``, ``slurm_limits`` do), run
commands except through the ``CommandRunner`` it was given, or submit, poll or act
on jobs.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Mapping, Sequence

from dethpc.backends import slurm_limits as sl
from dethpc.backends import slurm_parse as sp
from dethpc.backends.base import UNLIMITED, PoolLimits
from dethpc.backends.slurm_site_cache import SiteCache, Stamp, config_subset
from dethpc.common.errors import CommandError, SubmitError
from dethpc.common.runner import CommandRunner

log = logging.getLogger(__name__)

#: Slurm's own default ``MaxArraySize`` (used when the config does not give a number)
DEFAULT_MAX_ARRAY_SIZE = 1001
#: seconds between reads of the user's limits while sacctmgr fails (slurmdbd away)
LIMITS_RETRY_S = 60.0
#: whether this cluster is in a federation: one FED_INFO RPC (nothing printed when not)
FEDERATION_ARGV = ["scontrol", "show", "federation"]


# ------------------------------------------------------------------- pure pieces
def array_limit(config: Mapping[str, str]) -> int:
    """Largest array index + 1 the site accepts (``MaxArraySize``; Slurm's default
    when the config has none or not a number)."""
    value = config.get("MaxArraySize", str(DEFAULT_MAX_ARRAY_SIZE))
    return int(value) if value.isdigit() else DEFAULT_MAX_ARRAY_SIZE


def accounting_on(config: Mapping[str, str]) -> bool:
    """True unless ``AccountingStorageType`` is missing or ``.../none``."""
    kind = config.get("AccountingStorageType", "")
    return bool(kind) and not kind.endswith("/none")


def federated(out: str) -> bool:
    """``scontrol show federation`` names a federation (its first line,
    ``Federation: <name>``); a cluster in none prints nothing."""
    return "Federation:" in out


def check_partition(parts: Mapping[str, sp.Partition], partition: str, nodes: int,
                    tasks_per_node: int, gpus_per_node: int) -> None:
    """Raise ``SubmitError`` when ``partition`` is not one of ``parts`` or cannot fit
    ``nodes`` nodes each offering ``tasks_per_node`` CPUs and ``gpus_per_node`` GPUs."""
    if partition not in parts:
        raise SubmitError(
            f"partition {partition!r} does not exist on this cluster; existing "
            f"partitions: {', '.join(sorted(parts)) or '(none)'}. Fix the resource "
            "pool's `partition` in the cluster config.")
    part = parts[partition]
    fit = part.nodes_fitting(cpus=tasks_per_node, gpus=gpus_per_node)
    if fit >= nodes:
        return
    shape = ", ".join(f"{g.count}x({g.cpus} CPUs, {g.gpus} GPUs)" for g in part.groups)
    if fit:
        most = (f"so at most {fit} such node(s), {fit * tasks_per_node} task(s). Ask for at "
                f"most {fit * tasks_per_node} slots per trial ({tasks_per_node} per node)")
    else:
        most = (f"so no node holds {tasks_per_node} task(s) with {gpus_per_node} GPU(s). "
                "Ask for fewer slots per node or per trial")
    raise SubmitError(
        f"partition {part.name!r} cannot fit {nodes} node(s) x {tasks_per_node} task(s) "
        f"with {gpus_per_node} GPU(s) each: it has {shape or 'no nodes'}, {most}, or use "
        "a pool on a bigger partition.")


def check_qos(qos: str, known: set[str]) -> None:
    """Raise ``SubmitError`` when ``qos`` is not one of the site's QoS."""
    if qos not in known:
        raise SubmitError(f"QoS {qos!r} does not exist; existing QoS: "
                          f"{', '.join(sorted(known))}. Fix the pool's `qos`.")


def limits_due(read: bool, tried_at: float | None, now: float, retry_s: float) -> bool:
    """Whether to run the limit queries now: never once read; else on the first call
    and then at most every ``retry_s`` seconds."""
    return not read and (tried_at is None or now - tried_at >= retry_s)


def slurm_up(runner: CommandRunner) -> bool:
    """``sbatch`` is on PATH and ``scontrol ping`` says the controller is UP."""
    if shutil.which("sbatch") is None:
        return False
    try:
        out = runner.run(["scontrol", "ping"], check=False, retry=False)
    except CommandError:
        return False
    return " is UP" in out.stdout


# ------------------------------------------------------------------------ the site
class SlurmSite:
    """The facts of one Slurm site, each asked once; see the module docstring."""

    def __init__(self, runner: CommandRunner, user: str | None,
                 limits_retry_s: float = LIMITS_RETRY_S,
                 cache: SiteCache | None = None) -> None:
        self.runner = runner
        #: answers kept across processes (None: each process asks)
        self.cache = cache
        #: the partitions came from ``cache`` (a refusal is asked again live)
        self._partitions_kept = False
        self.user = user
        self.limits_retry_s = limits_retry_s
        self._config: dict[str, str] | None = None
        self._partitions: dict[str, sp.Partition] | None = None
        self._qos: set[str] | None = None
        self._accounting: bool | None = None
        self._local: bool | None = None
        self._assocs: sl.UserAssocs | None = None
        self._qos_limits: dict[str, sl.QosLimits] = {}
        #: the user's limits were read (or there are none to read): kept for the
        #: instance's life; until then, read again at most every ``limits_retry_s``
        self._limits_read = False
        self._limits_tried_at: float | None = None

    def config(self) -> dict[str, str]:
        """``scontrol show config``'s fields that dethpc reads (``CONFIG_KEYS``) as a
        dict: kept ones (``cache``), else fetched once."""
        if self._config is None:
            kept = self._kept("config")
            if isinstance(kept, dict) and all(isinstance(v, str) for v in kept.values()):
                self._config = dict(kept)
            else:
                before = self.cache.before("config") if self.cache is not None else None
                self._config = config_subset(sp.parse_key_values(
                    self.runner.run(["scontrol", "show", "config"]).stdout))
                self._keep("config", self._config, before)
        return self._config

    def _kept(self, fact: str) -> object:
        if self.cache is None:
            return None
        return self.cache.get(fact)

    def _keep(self, fact: str, value: object, before: Stamp | None) -> None:
        if self.cache is not None:
            self.cache.put(fact, value, before)

    def max_array_size(self) -> int:
        return array_limit(self.config())

    def local_only(self) -> bool:
        """Whether squeue may be told ``--local``: the cluster is in no federation.
        Without it every squeue asks slurmctld for the federation first (FED_INFO: one
        of the poll's three RPCs, issue 48); asked here once (one RPC) instead. A cluster
        in a federation, or a question that failed (asked again next time), keeps the
        plain squeue, which also lists the jobs its siblings run."""
        if self._local is None:
            kept = self._kept("federated")
            if isinstance(kept, bool):
                self._local = not kept
                return self._local
            before = self.cache.before("federated") if self.cache is not None else None
            try:
                res = self.runner.run(FEDERATION_ARGV, check=False)
            except CommandError:
                return False
            if res.returncode != 0:
                return False
            self._local = not federated(res.stdout)
            self._keep("federated", not self._local, before)
        return self._local

    def accounting_enabled(self) -> bool:
        """True unless ``AccountingStorageType`` is none (or sacct said so)."""
        if self._accounting is None:
            self._accounting = accounting_on(self.config())
        return self._accounting

    @property
    def accounting_known_off(self) -> bool:
        """Accounting is known to be off (the config said so when asked, or sacct did):
        knowing it costs no command."""
        return self._accounting is False

    def no_accounting(self) -> None:
        """sacct said accounting storage is disabled: believe it from now on."""
        self._accounting = False

    def partitions(self) -> dict[str, sp.Partition]:
        """``sinfo``'s partitions: kept ones (``cache``), else fetched once."""
        if self._partitions is None:
            kept = self._kept("sinfo")
            if isinstance(kept, str):
                self._partitions = sp.parse_sinfo(kept)
                self._partitions_kept = True
            else:
                self._ask_partitions()
        assert self._partitions is not None
        return self._partitions

    def _ask_partitions(self) -> None:
        before = self.cache.before("sinfo") if self.cache is not None else None
        out = self.runner.run(["sinfo", "-h", "-o", sp.SINFO_FORMAT]).stdout
        self._partitions = sp.parse_sinfo(out)
        self._partitions_kept = False
        self._keep("sinfo", out, before)

    def qos_names(self) -> set[str]:
        if self._qos is None:
            self._qos = sl.parse_qos_names(self.runner.run(sl.QOS_NAMES_ARGV).stdout)
        return self._qos

    def check_pool(self, partition: str | None, qos: str | None, nodes: int,
                   tasks_per_node: int, gpus_per_node: int) -> None:
        """``Backend.check_pool``: one sinfo (cached; kept ones that refuse the pool are
        asked again), and the QoS list (cached) when a QoS is named and accounting is
        on."""
        parts = self.partitions()
        if partition is not None:
            try:
                check_partition(parts, partition, nodes, tasks_per_node, gpus_per_node)
            except SubmitError:
                if not self._partitions_kept:
                    raise
                self._ask_partitions()            # kept facts never refuse alone
                assert self._partitions is not None
                check_partition(self._partitions, partition, nodes, tasks_per_node,
                                gpus_per_node)
        if qos is not None and self.accounting_enabled():
            check_qos(qos, self.qos_names())

    def job_limits(self, partition: str | None, qos: str | None, account: str | None,
                   extra_args: Sequence[str] = ()) -> PoolLimits:
        """The user's per-user limits for jobs of this partition/QoS/account: two
        sacctmgr commands on the first call, none after. No user or no accounting: no
        limits. sacctmgr failing (slurmdbd away): no limits for now (sbatch refusals
        are still waited out), and the two commands again ``limits_retry_s`` later."""
        now = time.monotonic()
        if limits_due(self._limits_read, self._limits_tried_at, now, self.limits_retry_s):
            self._limits_tried_at = now
            self._read_limits()
        if self._assocs is None:
            return UNLIMITED
        return sl.pool_limits(self._assocs, self._qos_limits, partition=partition, qos=qos,
                              account=account, extra_args=extra_args)

    def _read_limits(self) -> None:
        if self.user is None or not self.accounting_enabled():
            self._limits_read = True          # nothing to read
            return
        try:
            self._assocs = sl.parse_user_assocs(
                self.runner.run(sl.user_argv(self.user)).stdout, self.user)
            self._qos_limits = sl.parse_qos_limits(self.runner.run(sl.QOS_ARGV).stdout)
            self._limits_read = True
        except CommandError as exc:
            log.warning("cannot read %s's job limits (%s): submitting without "
                        "counting for now (Slurm's refusals are waited out); "
                        "reading them again in %.0f s", self.user, exc,
                        self.limits_retry_s)
            self._assocs = None
