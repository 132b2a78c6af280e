"""Zero-config: is this machine a Slurm login node, and what cluster config does Slurm imply?

Owns: ``probe`` (one look at Slurm when no cluster config exists anywhere: ``sbatch`` and
``scontrol`` on PATH, ``scontrol ping`` answering, then ``scontrol show config``, ``sinfo``
and, where accounting answers, the user's default account and QoS), ``derive`` (pure:
``SlurmFacts`` -> the raw cluster config, table-tested), the per-``DETHPC_HOME`` cache
(``detected-cluster.yaml``: one probe, re-probed when the cluster's name or its
``slurm.conf`` changes) and ``detect`` (the whole, for ``load_cluster_config``).
docs/config.md ("Cluster config") says what is derived and the precedence.
Must not: run commands except through the ``CommandRunner`` it was given, parse a cluster
config (``dethpc.config`` does), or submit anything.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from dethpc.backends import slurm_parse as sp
from dethpc.common.errors import CommandError, ConfigError
from dethpc.common.runner import CommandRunner
from dethpc.config._yaml import load_stored_yaml

log = logging.getLogger(__name__)

#: ``DETHPC_DETECT=0``: never probe Slurm; without a config file the backend is local
ENV_DETECT = "DETHPC_DETECT"
CACHE_NAME = "detected-cluster.yaml"
#: sinfo: partition (default marked ``*``), CPUs, memory (MB), GRES, node count
SINFO_FORMAT = "%P|%c|%m|%G|%D"
#: a cache whose slurm.conf cannot be seen (configless Slurm) is trusted this long
CONFIGLESS_TTL_S = 24 * 3600.0
#: the scratch-like variables a site sets, first found wins for ``runs_root``
RUNS_VARS = ("SCRATCH", "WORK")


@dataclass(frozen=True)
class SlurmFacts:
    """What one probe learnt; ``account``/``qos`` are None without accounting."""

    cluster_name: str
    slurm_conf: str
    partition: str
    cpus_per_node: int
    gpus_per_node: int
    nodes: int
    account: str | None = None
    qos: str | None = None


@dataclass(frozen=True)
class DefaultPartition:
    name: str
    cpus: int
    gpus: int
    nodes: int


def default_partition(sinfo: str) -> DefaultPartition | None:
    """The partition ``sinfo -h -o SINFO_FORMAT`` marks as the default (``*``), else the
    first; its smallest node (CPUs, GPUs) so that every node fits a slot."""
    rows: dict[str, list[tuple[int, int, int]]] = {}
    default = None
    for line in sinfo.splitlines():
        fields = [f.strip() for f in line.split("|")]
        if len(fields) < 5 or not fields[0]:
            continue
        name = fields[0]
        if name.endswith("*"):
            name = name[:-1]
            default = default or name
        cpus = int(fields[1].rstrip("+")) if fields[1].rstrip("+").isdigit() else 0
        nodes = int(fields[4]) if fields[4].isdigit() else 0
        rows.setdefault(name, []).append((cpus, sp.parse_gres_gpus(fields[3]), nodes))
    if not rows:
        return None
    name = default or next(iter(rows))
    groups = rows[name]
    return DefaultPartition(name, min(g[0] for g in groups), min(g[1] for g in groups),
                            sum(g[2] for g in groups))


def runs_root(env: Mapping[str, str], home: Path) -> str:
    """``$SCRATCH/dethpc-runs`` or ``$WORK/dethpc-runs`` when the site sets one, else the
    runs folder of ``DETHPC_HOME`` (``~/.dethpc/runs``): a place the compute nodes see."""
    for var in RUNS_VARS:
        value = env.get(var, "")
        if value and Path(value).is_dir():
            return str(Path(value) / "dethpc-runs")
    return str(home / "runs")


def derive(facts: SlurmFacts, env: Mapping[str, str], home: Path) -> dict[str, Any]:
    """The cluster config Slurm's answers imply: the Slurm backend, one pool on the
    default partition (the user's default account and QoS when accounting gives them;
    a slot is a GPU on GPU nodes, else a CPU), ``runs_root`` from ``runs_root``."""
    pool: dict[str, Any] = {"partition": facts.partition}
    if facts.account:
        pool["account"] = facts.account
    if facts.qos:
        pool["qos"] = facts.qos
    if facts.gpus_per_node > 0:
        pool.update(gres="gpu", slots_per_node=facts.gpus_per_node,
                    cpus_per_slot=max(1, facts.cpus_per_node // facts.gpus_per_node))
    else:
        pool.update(slots_per_node=max(1, facts.cpus_per_node), cpus_per_slot=1)
    name = facts.partition
    return {"backend": "slurm", "runs_root": runs_root(env, home),
            "default_pool": name, "pools": {name: pool}}


def _first(text: str) -> str | None:
    for line in text.splitlines():
        value = line.strip().strip("|")
        if value:
            return value
    return None


PING_ARGV = ["scontrol", "ping"]
CONFIG_ARGV = ["scontrol", "show", "config"]
SINFO_ARGV = ["sinfo", "-h", "-o", SINFO_FORMAT]


def account_argv(user: str) -> list[str]:
    return ["sacctmgr", "-n", "-P", "show", "user", user, "format=defaultaccount"]


def default_qos_argv(user: str, account: str) -> list[str]:
    return ["sacctmgr", "-n", "-P", "show", "assoc", f"user={user}", f"account={account}",
            "format=defaultqos"]


def probe(runner: CommandRunner, user: str,
          which: Callable[[str], str | None] = shutil.which) -> SlurmFacts | None:
    """One look at Slurm; None when this is not a login node whose controller answers."""
    if which("sbatch") is None or which("scontrol") is None:
        return None
    try:
        ping = runner.run(PING_ARGV, check=False, retry=False)
        if ping.returncode != 0 or " UP" not in ping.stdout.upper():
            return None
        config = sp.parse_key_values(runner.run(CONFIG_ARGV).stdout)
        part = default_partition(runner.run(SINFO_ARGV).stdout)
    except CommandError as exc:
        log.info("slurm probe: %s", exc)
        return None
    if part is None:
        return None
    account = qos = None
    try:
        account = _first(runner.run(account_argv(user), retry=False).stdout)
        if account:
            qos = _first(runner.run(default_qos_argv(user, account), retry=False).stdout)
    except CommandError:
        pass    # no accounting: Slurm applies its own defaults
    return SlurmFacts(cluster_name=config.get("ClusterName", ""),
                      slurm_conf=config.get("SLURM_CONF", ""), partition=part.name,
                      cpus_per_node=part.cpus, gpus_per_node=part.gpus, nodes=part.nodes,
                      account=account, qos=qos)


def _conf_stamp(path: str) -> float | None:
    try:
        return os.stat(path).st_mtime if path else None
    except OSError:
        return None


def cache_valid(cached: Mapping[str, Any], env: Mapping[str, str], now: float) -> bool:
    """The cache holds while its slurm.conf is unchanged (the same path as
    ``$SLURM_CONF`` when set, the same mtime); configless: for ``CONFIGLESS_TTL_S``."""
    facts = cached.get("facts") or {}
    conf = str(facts.get("slurm_conf") or "")
    if env.get("SLURM_CONF") and env["SLURM_CONF"] != conf:
        return False
    stamp = _conf_stamp(conf)
    if stamp is None:
        return now - float(cached.get("probed_at", 0)) < CONFIGLESS_TTL_S
    return stamp == cached.get("conf_mtime")


def detect(home: Path, env: Mapping[str, str] | None = None,
           runner: CommandRunner | None = None,
           say: Callable[[str], None] | None = None) -> dict[str, Any] | None:
    """The derived raw cluster config, from ``home``'s cache or one probe (written to the
    cache and said once through ``say``); None when Slurm does not answer here or
    ``DETHPC_DETECT=0``."""
    env = os.environ if env is None else env
    if env.get(ENV_DETECT, "1") == "0":
        return None
    cache = home / CACHE_NAME
    now = time.time()
    try:
        cached = load_stored_yaml(cache.read_text(), str(cache)) if cache.is_file() else None
    except (OSError, ConfigError):
        cached = None
    if isinstance(cached, dict) and cache_valid(cached, env, now):
        return dict(cached["config"])
    user = env.get("USER") or env.get("LOGNAME") or ""
    if not user:
        import getpass

        user = getpass.getuser()
    facts = probe(runner or CommandRunner(timeout=15.0, retries=0), user)
    if facts is None:
        if shutil.which("sbatch") is not None:
            (say or _stderr)("dethpc: sbatch is on PATH but Slurm's controller does not "
                             "answer (`scontrol ping`): using the local backend; write a "
                             "cluster config to use Slurm (docs/config.md#cluster-config)")
        return None
    config = derive(facts, env, home)
    try:
        home.mkdir(parents=True, exist_ok=True)
        cache.write_text(yaml.safe_dump({
            "facts": asdict(facts), "conf_mtime": _conf_stamp(facts.slurm_conf),
            "probed_at": now, "config": config}, sort_keys=False))
    except OSError as exc:
        log.info("cannot cache the detected cluster config in %s: %s", cache, exc)
    pool = config["pools"][config["default_pool"]]
    extras = ", ".join(f"{k} {pool[k]}" for k in ("account", "qos") if k in pool)
    (say or _stderr)(
        f"dethpc: no cluster config; Slurm cluster {facts.cluster_name or '?'} answers: "
        f"jobs go to partition {facts.partition}{f' ({extras})' if extras else ''}, runs "
        f"under {config['runs_root']}. `dethpc config show-cluster` prints this config "
        "to save and edit (docs/config.md#cluster-config)")
    return config


def _stderr(text: str) -> None:
    print(text, file=sys.stderr)
