"""The cluster config: the admin-owned YAML that maps resource pools to Slurm.

Owns: ``load_cluster_config`` (the lookup order: the file ``dethpc.config.locate`` finds
(argument, ``$DETHPC_CLUSTER_CONFIG``, the user's ``~/.config/dethpc/cluster.yaml``
(``$XDG_CONFIG_HOME``), the site's ``/etc/dethpc/cluster.yaml``), then what the caller's
``detect`` derives from Slurm, then built-in local defaults), ``parse_cluster_config``
and ``cluster_to_dict`` (the effective config, for ``dethpc config show-cluster``).
Must not: talk to Slurm (whether a partition exists is checked at submit time)
or know about experiments.

Relative paths in the file (``runs_root``, ``containers.sif_cache``) are relative
to the file's directory; ``~`` is expanded.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from dethpc.common.errors import ConfigError, FieldError
from dethpc.common.paths import dethpc_home
from dethpc.config._check import (
    Checker,
    allowed_list,
    join,
    sbatch_args,
    sbatch_time,
    show,
    signal_name,
)
from dethpc.config._yaml import load_yaml_text
from dethpc.config.locate import (  # noqa: F401 - ENV_VAR, SYSTEM_PATH: re-exported
    ENV_VAR,
    SYSTEM_PATH,
    find_cluster_config,
    user_config_path,
)
from dethpc.config.model import (
    ClusterConfig,
    ContainerSettings,
    RequeueMode,
    ResourcePool,
    WorkerPool,
)
from dethpc.config.slurm_client import client_env, path_with_first  # noqa: F401
from dethpc.config.workers import parse_workers

BUILTIN = "<built-in defaults>"
#: the source of a config derived from Slurm's answers (``slurm_detect``)
DETECTED = "<detected from Slurm>"

_TOP = ("backend", "runs_root", "database_url", "database_url_file", "default_pool", "pools",
        "containers", "local_max_concurrent", "command_timeout_s", "command_retries", "tick_min_s",
        "tick_max_s", "metrics_poll_s", "pool_poll_s", "pool_quiet_poll_s", "daemon_lease_s",
        "runs_mode", "python", "slurm_bin", "slurm_conf", "report_bad_nodes", "max_idle_cap_s")
_POOL = ("partition", "qos", "account", "slots_per_node", "gres", "gpu_type",
         "cpus_per_slot", "mem_per_slot", "preemptible", "default_time", "signal",
         "signal_grace_s", "socket_ifname", "sbatch_args", "requeue", "workers")
_CONTAINERS = ("runtime", "sif_cache", "binds", "pull", "cache_dir", "tmp_dir", "cleanenv",
               "pass_env", "containall", "python")
_MEMORY = re.compile(r"^\d+[KMGT]?$", re.IGNORECASE)
_POOL_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


def default_cluster_config() -> ClusterConfig:
    """The built-in config: local backend, one pool, runs under ``dethpc_home()``."""
    return ClusterConfig(
        runs_root=dethpc_home() / "runs",
        pools={"default": ResourcePool(name="default")},
        source=BUILTIN,
    )


def load_cluster_config(path: str | Path | None = None, *,
                        detect: Callable[[], dict[str, Any] | None] | None = None,
                        ) -> ClusterConfig:
    """Load and validate the effective cluster config (see the module docstring).
    ``detect``: called when no file is found; the raw config it returns (derived from
    Slurm's answers) is used, None means the built-in local defaults."""
    found = find_cluster_config(path)
    if found is None:
        raw = detect() if detect is not None else None
        if raw is None:
            return default_cluster_config()
        return parse_cluster_config(raw, DETECTED, base_dir=dethpc_home())
    source = str(found)
    try:
        text = found.read_text(encoding="utf-8")
    except FileNotFoundError:
        hint = f" (named by ${ENV_VAR})" if path is None else ""
        raise ConfigError([FieldError("", f"file not found{hint}")], source) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError([FieldError("", f"cannot read the file: {exc}")], source) from None
    raw = load_yaml_text(text, source)
    return parse_cluster_config({} if raw is None else raw, source,
                                base_dir=found.resolve().parent)


def parse_cluster_config(raw: Any, source: str = "cluster config",
                         base_dir: Path | None = None) -> ClusterConfig:
    """Validate a raw cluster config dict; raise ``ConfigError`` listing every problem."""
    ck = Checker()
    if not isinstance(raw, dict):
        ck.error("", f"expected a mapping, got {show(raw)}")
        ck.raise_if_errors(source)
    ck.keys(raw, "", _TOP)
    base = base_dir or Path.cwd()
    pools = _pools(ck, raw.get("pools"))
    tick_min = float(ck.number(raw.get("tick_min_s"), "tick_min_s", 0.5, above=0))
    tick_max = float(ck.number(raw.get("tick_max_s"), "tick_max_s", 10.0, above=0))
    if tick_max < tick_min:
        ck.error("tick_max_s", f"must be >= tick_min_s ({tick_min}), got {tick_max}")
    lease = float(ck.number(raw.get("daemon_lease_s"), "daemon_lease_s",
                            max(60.0, 2 * tick_max), above=0))
    if lease < 2 * tick_max:
        ck.error("daemon_lease_s", f"must be at least twice tick_max_s ({2 * tick_max:g}) so "
                 f"that the daemon renews it in time, got {lease:g}")
    cfg = ClusterConfig(
        backend=ck.choice(raw.get("backend"), "backend", ("local", "slurm"),
                          "local"),  # type: ignore[arg-type]
        runs_root=_path(ck, raw.get("runs_root"), "runs_root", base) or dethpc_home() / "runs",
        database_url=str(ck.string(raw.get("database_url"), "database_url", "",
                                   nonempty=False)),
        database_url_file=_path(ck, raw.get("database_url_file"), "database_url_file", base),
        default_pool=_default_pool(ck, raw.get("default_pool"), pools),
        pools=pools,
        containers=_containers(ck, raw.get("containers"), base),
        local_max_concurrent=int(ck.integer(raw.get("local_max_concurrent"),
                                            "local_max_concurrent", 0, minimum=0)),
        command_timeout_s=float(ck.number(raw.get("command_timeout_s"), "command_timeout_s",
                                          60.0, above=0)),
        command_retries=int(ck.integer(raw.get("command_retries"), "command_retries", 3,
                                       minimum=0)),
        tick_min_s=tick_min,
        tick_max_s=tick_max,
        metrics_poll_s=float(ck.number(raw.get("metrics_poll_s"), "metrics_poll_s", 0.2,
                                       minimum=0)),
        pool_poll_s=float(ck.number(raw.get("pool_poll_s"), "pool_poll_s", 10.0, minimum=0)),
        pool_quiet_poll_s=float(ck.number(raw.get("pool_quiet_poll_s"), "pool_quiet_poll_s",
                                          60.0, minimum=0)),
        daemon_lease_s=lease,
        runs_mode=ck.choice(raw.get("runs_mode"), "runs_mode", ("private", "group"),
                            "private"),  # type: ignore[arg-type]
        python=ck.string(raw.get("python"), "python", None),
        slurm_bin=_slurm_bin(ck, raw.get("slurm_bin"), base),
        slurm_conf=_existing_file(ck, raw.get("slurm_conf"), "slurm_conf", base),
        report_bad_nodes=bool(ck.boolean(raw.get("report_bad_nodes"), "report_bad_nodes",
                                         False)),
        max_idle_cap_s=float(ck.number(raw.get("max_idle_cap_s"), "max_idle_cap_s", 0.0,
                                       minimum=0)),
        source=source,
    )
    if cfg.database_url and cfg.database_url_file is not None:
        ck.error("database_url_file", "give database_url or database_url_file, not both "
                 "(the file holds a URL with the user's own credentials)")
    ck.raise_if_errors(source)
    return cfg


def _path(ck: Checker, value: Any, path: str, base: Path) -> Path | None:
    text = ck.string(value, path, None)
    if text is None:
        return None
    location = Path(text).expanduser()
    return location if location.is_absolute() else base / location


def _slurm_bin(ck: Checker, value: Any, base: Path) -> Path | None:
    location = _path(ck, value, "slurm_bin", base)
    if location is not None and not (location / "sbatch").is_file():
        ck.error("slurm_bin", f"{show(str(location))} holds no sbatch; allowed: the directory "
                 "of Slurm's client commands (sbatch, squeue, scontrol ...)")
    return location


def _existing_file(ck: Checker, value: Any, path: str, base: Path) -> Path | None:
    location = _path(ck, value, path, base)
    if location is not None and not location.is_file():
        ck.error(path, f"{show(str(location))} is not a file")
    return location


def slurm_client_env(cluster: ClusterConfig, environ: Mapping[str, str]) -> dict[str, str]:
    """``dethpc.config.slurm_client.client_env`` of the config's ``slurm_bin`` and
    ``slurm_conf``: ``PATH`` with ``slurm_bin`` first and ``SLURM_CONF``, unless
    ``environ`` already says so."""
    return client_env(None if cluster.slurm_bin is None else str(cluster.slurm_bin),
                      None if cluster.slurm_conf is None else str(cluster.slurm_conf),
                      environ)


def _pools(ck: Checker, value: Any) -> dict[str, ResourcePool]:
    if value is None:
        return {"default": ResourcePool(name="default")}
    data = ck.mapping(value, "pools")
    if not data and isinstance(value, dict):
        ck.error("pools", "expected at least one pool, got {}")
    pools: dict[str, ResourcePool] = {}
    for name, spec in data.items():
        sub = join("pools", str(name))
        if not isinstance(name, str) or not _POOL_NAME.match(name):
            ck.error(sub, f"pool names are letters, digits, '_', '.' and '-', got {show(name)}")
            continue
        pools[name] = _pool(ck, name, spec, sub)
    return pools


def _pool(ck: Checker, name: str, value: Any, path: str) -> ResourcePool:
    data = ck.mapping(value, path)
    ck.keys(data, path, _POOL)

    def text(key: str) -> str | None:
        return ck.string(data.get(key), join(path, key), None)

    return ResourcePool(
        name=name,
        partition=text("partition"),
        qos=text("qos"),
        account=text("account"),
        slots_per_node=int(ck.integer(data.get("slots_per_node"), join(path, "slots_per_node"),
                                      1, minimum=1)),
        gres=text("gres"),
        gpu_type=text("gpu_type"),
        cpus_per_slot=int(ck.integer(data.get("cpus_per_slot"), join(path, "cpus_per_slot"),
                                     1, minimum=1)),
        mem_per_slot=_memory(ck, data.get("mem_per_slot"), join(path, "mem_per_slot")),
        preemptible=ck.boolean(data.get("preemptible"), join(path, "preemptible"), False),
        default_time=sbatch_time(ck, data.get("default_time"), join(path, "default_time")),
        signal=signal_name(ck, data.get("signal"), join(path, "signal"), "USR2"),
        signal_grace_s=int(ck.integer(data.get("signal_grace_s"), join(path, "signal_grace_s"),
                                      120, minimum=0)),
        socket_ifname=text("socket_ifname"),
        sbatch_args=sbatch_args(ck, data.get("sbatch_args"), join(path, "sbatch_args")),
        requeue=RequeueMode(ck.choice(data.get("requeue"), join(path, "requeue"),
                                      [m.value for m in RequeueMode], RequeueMode.NORMAL.value)),
        workers=parse_workers(ck, data.get("workers"), join(path, "workers")) or WorkerPool(),
    )


def _memory(ck: Checker, value: Any, path: str) -> str | None:
    if value is None:
        return None
    if isinstance(value, str) and _MEMORY.match(value.strip()):
        return value.strip()
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return str(value)
    ck.error(path, f"expected a Slurm memory size like '2G', '500M' or 4096 (MB), "
                   f"got {show(value)}")
    return None


def _default_pool(ck: Checker, value: Any, pools: Mapping[str, ResourcePool]) -> str:
    if value is None:
        if "default" in pools or len(pools) != 1:
            name = "default"
        else:
            name = next(iter(pools))
    else:
        name = str(ck.string(value, "default_pool", "default"))
    if pools and name not in pools:
        ck.error("default_pool", f"{name!r} is not a pool; allowed: {allowed_list(pools)}")
    return name


_ENV_GLOB = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\*?$")


def _containers(ck: Checker, value: Any, base: Path) -> ContainerSettings:
    data = ck.mapping(value, "containers")
    ck.keys(data, "containers", _CONTAINERS)
    pass_env = ck.string_list(data.get("pass_env"), "containers.pass_env")
    for i, name in enumerate(pass_env):
        if not _ENV_GLOB.match(name):
            ck.error(f"containers.pass_env[{i}]", f"{name!r} is not a variable name or a "
                     "prefix glob; allowed: NAME or PREFIX_* (letters, digits, _)")
    return ContainerSettings(
        runtime=ck.choice(data.get("runtime"), "containers.runtime",
                          ("none", "apptainer", "singularity", "charliecloud"),
                          "none"),  # type: ignore[arg-type]
        sif_cache=_path(ck, data.get("sif_cache"), "containers.sif_cache", base),
        binds=ck.string_list(data.get("binds"), "containers.binds"),
        pull=ck.choice(data.get("pull"), "containers.pull", ("login", "job"),
                       "login"),  # type: ignore[arg-type]
        cache_dir=_path(ck, data.get("cache_dir"), "containers.cache_dir", base),
        tmp_dir=_path(ck, data.get("tmp_dir"), "containers.tmp_dir", base),
        cleanenv=bool(ck.boolean(data.get("cleanenv"), "containers.cleanenv", True)),
        pass_env=pass_env,
        containall=bool(ck.boolean(data.get("containall"), "containers.containall", False)),
        python=str(ck.string(data.get("python"), "containers.python", "python3")),
    )


def cluster_to_dict(cfg: ClusterConfig) -> dict[str, Any]:
    """The effective config as plain data that ``parse_cluster_config`` reads back.

    Paths become strings, tuples lists; ``source`` and the pools' ``name`` (the
    key already says it) are left out.
    """
    data = _plain(dataclasses.asdict(cfg))
    del data["source"]
    for pool in data["pools"].values():
        del pool["name"]
    return dict(data)


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Path):
        return str(value)
    return value
