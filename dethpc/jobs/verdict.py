"""Slurm's verdict at submit: which config fields are behind a refusal.

Owns: ``suspects`` (a pure function from Slurm's words to the cluster-config and
experiment-config fields, with their values, that decide what Slurm refused) and
``refusal_message`` (the text ``dethpc submit`` prints: Slurm's own words, the pool,
the fields, the fix). When sbatch's getopt refuses an option (``sbatch: unrecognized
option '--x'``), the fields are the ``sbatch_args`` items that spell it
(``option_suspects``). ``experiments.check_with_scheduler`` runs the one
``sbatch --test-only`` and calls these.
Must not: run commands or read files.
"""

from __future__ import annotations

from dataclasses import dataclass

from dethpc.common.sbatch_options import (
    canonical_option,
    complained_option,
    getopt_complaint,
    managed_option,
    spells_option,
)
from dethpc.config.model import ClusterConfig, ExperimentConfig, ResourcePool


@dataclass(frozen=True)
class Suspect:
    """A config field that decides what Slurm judged, and its value (None: unset)."""

    field: str
    value: object

    def __str__(self) -> str:
        return f"{self.field} = {'(unset)' if self.value is None else repr(self.value)}"


@dataclass(frozen=True)
class _Rule:
    #: lower-case fragments of Slurm's words that select this rule
    words: tuple[str, ...]
    #: pool fields (``pools.<pool>.<key>``) and experiment fields behind it
    pool_keys: tuple[str, ...]
    experiment_keys: tuple[str, ...]
    fix: str


RULES: tuple[_Rule, ...] = (
    _Rule(("invalid partition",), ("partition",), (),
          "name a partition that exists (`sinfo -s`)"),
    _Rule(("invalid qos",), ("qos", "account"), (),
          "name a QoS that exists and that the account allows (`sacctmgr show assoc "
          "user=$USER format=account,qos`)"),
    _Rule(("invalid account",), ("account", "partition"), (),
          "name an account you have an association with (`sacctmgr show assoc user=$USER "
          "format=account,partition`), or ask the admins to add one"),
    _Rule(("time limit",), ("default_time", "partition"), ("slurm.time",),
          "ask for at most the partition's MaxTime (`scontrol show partition`)"),
    _Rule(("node count specification",), ("slots_per_node", "partition"),
          ("resources.slots_per_trial", "slurm.slots_per_node"),
          "ask for at most as many nodes as the partition has"),
    _Rule(("generic resource", "gres"), ("gres", "gpu_type"), ("slurm.gpu_type",),
          "name a GRES type the nodes have (`sinfo -o '%P %G'`)"),
    # more CPUs in all than the partition has (sbatch --test-only here: 12 nodes x 8
    # tasks on four 16-CPU nodes)
    _Rule(("more processors requested than permitted",),
          ("slots_per_node", "cpus_per_slot", "partition"),
          ("resources.slots_per_trial", "slurm.slots_per_node"),
          "ask for at most the partition's CPUs in all: slots_per_trial x cpus_per_slot "
          "(`sinfo -p PARTITION -o '%D nodes x %c CPUs'`)"),
    _Rule(("node configuration is not available", "memory required", "cpu count"),
          ("slots_per_node", "cpus_per_slot", "mem_per_slot", "gres", "gpu_type",
           "partition"),
          ("resources.slots_per_trial", "slurm.slots_per_node", "slurm.gpu_type"),
          "fit one node: slots per node x cpus_per_slot CPUs, x mem_per_slot memory and "
          "that many GPUs of gpu_type (`sinfo -N -o '%N %c %m %G'`)"),
    _Rule(("policy", "qosmax", "assocmax", "grp"), ("qos", "account"), (),
          "stay within the QoS's and the association's limits (`sacctmgr show qos`)"),
)

#: the fix for getopt's complaint about an ``sbatch_args`` item (``option_suspects``)
OPTION_FIX = ("remove the item, or write an option this site's sbatch knows (`sbatch "
              "--help`; a value goes after '=': --option=value)")


def _pool_value(pool: ResourcePool, key: str) -> object:
    return getattr(pool, key)


def _experiment_value(cfg: ExperimentConfig, key: str) -> object:
    section, _, name = key.partition(".")
    return getattr(getattr(cfg, section), name)


def _pools(cfg: ExperimentConfig, cluster: ClusterConfig) -> list[ResourcePool]:
    """The trial's pool, then its het components' other pools."""
    pools = [cluster.pool(cfg.resources.resource_pool)]
    pools += [cluster.pool(c.resource_pool) for c in cfg.slurm.components
              if c.resource_pool and cluster.pool(c.resource_pool) not in pools]
    return pools


def option_suspects(words: str, cfg: ExperimentConfig,
                    cluster: ClusterConfig) -> list[Suspect]:
    """The ``sbatch_args`` items (the pools', then the experiment's, each with its index)
    behind getopt's complaint in ``words``: those that spell the option it names; when
    none does, those whose option sbatch 22.05 does not know; else every non-empty
    ``sbatch_args`` list. Empty for other words."""
    if not getopt_complaint(words):
        return []
    items = [(f"pools.{pool.name}.sbatch_args", pool.sbatch_args)
             for pool in _pools(cfg, cluster)]
    items.append(("slurm.sbatch_args", cfg.slurm.sbatch_args))
    named = complained_option(words)
    for chosen in (lambda a: named is not None and spells_option(a, named),
                   lambda a: canonical_option(a.removeprefix("!")) is None):
        found = [Suspect(f"{field}[{i}]", arg) for field, args in items
                 for i, arg in enumerate(args) if chosen(arg)]
        if found:
            return found
    return [Suspect(field, list(args)) for field, args in items if args]


def suspects(words: str, cfg: ExperimentConfig, cluster: ClusterConfig) -> list[Suspect]:
    """The fields behind Slurm's ``words`` about the trials' job of ``cfg``: the trial's
    pool (and het components' pools), set experiment fields, then any ``sbatch_args``
    (they can replace or drop every directive); for getopt's complaint about an option,
    the items that spell it (``option_suspects``). Empty when no rule knows the words."""
    by_option = option_suspects(words, cfg, cluster)
    if by_option:
        return by_option
    low = words.lower()
    rules = [r for r in RULES if any(w in low for w in r.words)]
    if not rules:
        return []
    pools = _pools(cfg, cluster)
    out: list[Suspect] = []
    for rule in rules:
        for pool in pools:
            for key in rule.pool_keys:
                value = _pool_value(pool, key)
                if value is not None or key in rule.pool_keys[:1]:
                    out.append(Suspect(f"pools.{pool.name}.{key}", value))
        for key in rule.experiment_keys:
            value = _experiment_value(cfg, key)
            if value is not None and (key != "resources.slots_per_trial" or value != 1):
                out.append(Suspect(key, value))
    for pool in pools:
        if pool.sbatch_args:
            out.append(Suspect(f"pools.{pool.name}.sbatch_args", list(pool.sbatch_args)))
    if cfg.slurm.sbatch_args:
        out.append(Suspect("slurm.sbatch_args", list(cfg.slurm.sbatch_args)))
    unique: list[Suspect] = []
    for s in out:
        if s.field not in (u.field for u in unique):
            unique.append(s)
    return unique


def refusal_message(words: str, cfg: ExperimentConfig, cluster: ClusterConfig,
                    directives: list[str]) -> str:
    """What ``dethpc submit`` says when Slurm refuses the trials' job."""
    pool = cluster.pool(cfg.resources.resource_pool)
    lines = [f"Slurm refuses the trials' job (sbatch --test-only): {words}",
             f"  resource pool {pool.name!r} of the cluster config {cluster.source}"]
    found = suspects(words, cfg, cluster)
    if found:
        lines.append("  the fields behind it:")
        lines += [f"    {s}" for s in found]
        if option_suspects(words, cfg, cluster):
            lines.append(f"  fix: {OPTION_FIX}")
        else:
            fixes = [r.fix for r in RULES if any(w in words.lower() for w in r.words)]
            lines.append(f"  fix: {fixes[0]}; or choose another pool with "
                         "resources.resource_pool")
    asked = [d for d in directives if managed_option(d) is None]
    lines.append(f"  the job asked for: {' '.join(asked)}")
    return "\n".join(lines)
