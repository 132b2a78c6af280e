"""The experiment config: Determined-compatible YAML -> ``ExperimentConfig``.

Owns: ``parse_experiment_config`` (validates every section and reports *all*
problems in one ``ConfigError``, each with the field path, the bad value and what
is allowed), ``check_supported`` (the submit-time refusal), ``load_experiment_config``
(file + ``--config`` overrides) and ``dump_config``. Determined 0.38.1's verdict
(``dethpc.config.expconf``) decides what is valid; this module merges it with
dethpc's own parsing (``_judge``). Determined fields with no meaning on Slurm are
accepted with a one-line warning (``cfg.warnings``); values Determined accepts
that dethpc cannot serve are listed in ``cfg.unsupported`` and refused at submit.
Must not: touch the store, the cluster config or Slurm; resolve resource pools
(the submitter does, with ``ClusterConfig.pool``).

Sections live in small modules: hyperparameters in ``hparams``, the searcher
and lengths in ``searcher``, generic checks in ``_check``.
"""

from __future__ import annotations

import copy
import posixpath
import re
import shlex
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path, PurePosixPath
from typing import Any

from dethpc.common.errors import ConfigError, FieldError
from dethpc.config._check import Checker, join, sbatch_args, sbatch_time, show
from dethpc.config._yaml import dump_yaml, load_yaml_file
from dethpc.config.expconf import Verdict, verdict
from dethpc.config.hparams import parse_hparams
from dethpc.config.model import (
    BadNodes,
    BindMount,
    CheckpointStorage,
    EnvironmentConfig,
    ExperimentConfig,
    HetComponent,
    Length,
    ResourcesConfig,
    SlurmSection,
    Stragglers,
    Watchdog,
)
from dethpc.config.overrides import apply_overrides
from dethpc.config.searcher import parse_length, parse_searcher
from dethpc.config.workers import parse_workers

_TOP_LEVEL = (
    "name", "description", "labels", "entrypoint", "hyperparameters", "searcher",
    "resources", "checkpoint_storage", "environment", "bind_mounts", "max_restarts",
    "min_validation_period", "min_checkpoint_period", "records_per_epoch",
    "reproducibility", "slurm", "data",
)
_IGNORED = "ignored: Determined field with no meaning on dethpc"
_IGNORED_TOP = {
    **{key: _IGNORED for key in (
        "workspace", "project", "scheduling_unit", "perform_initial_validation",
        "profiling", "optimizations", "debug", "integrations", "log_policies",
        "retention_policy", "checkpoint_policy", "internal", "preemption_timeout",
        "tensorboard_storage", "data_layer", "security")},
    "pbs": "ignored: dethpc runs on Slurm (use the slurm section)",
}
_K8S = "ignored: Kubernetes-only"
_RESOURCES = ("slots_per_trial", "resource_pool", "max_slots", "priority")
_RESOURCES_IGNORED = {
    **{key: _K8S for key in ("shm_size", "devices", "weight", "native_parallel",
                             "agent_label")},
    "is_single_node": "ignored: Slurm places the trial's tasks (slurm.slots_per_node and "
                      "the pool decide how many nodes)",
    "slots": "ignored: Determined reads resources.slots only for commands and generic tasks; "
             "an experiment's trials use resources.slots_per_trial",
}
#: parsed (Determined's rules apply) but with no effect on Slurm yet
_RESOURCES_UNUSED = {
    "max_slots": "ignored: dethpc does not cap an experiment's slots; bound the trials "
                 "running at once with searcher.max_concurrent_trials",
    "priority": "ignored: Slurm orders jobs by its own priority (QoS, fairshare); use the "
                "pool's QoS or slurm.sbatch_args: ['--nice=N']",
}
_ENVIRONMENT = ("image", "environment_variables")
_ENVIRONMENT_IGNORED = {key: _K8S for key in (
    "pod_spec", "registry_auth", "force_pull_image", "add_capabilities",
    "drop_capabilities", "proxy_ports", "ports")}
_DEVICE_KEYS = ("cpu", "cuda", "rocm", "gpu")  # "gpu" is Determined's old name for cuda
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: variables bash sets itself or keeps read-only: a job script cannot pass them on
#: (``export UID=1`` fails the script; ``_`` is the last command's path). Names starting
#: with ``BASH`` are bash's too.
SHELL_OWNED = frozenset({"_", "UID", "EUID", "PPID", "SHELLOPTS", "RANDOM", "SECONDS",
                         "LINENO", "HISTCMD", "FUNCNAME", "GROUPS", "PWD", "OLDPWD", "SHLVL",
                         "SRANDOM", "EPOCHREALTIME", "EPOCHSECONDS", "PIPESTATUS", "OPTIND",
                         "IFS", "PS4", "DIRSTACK", "COMP_WORDBREAKS"})


def shell_owned(name: str) -> bool:
    return name in SHELL_OWNED or name.startswith("BASH")


_CKPT_FIELDS = {
    "shared_fs": ("type", "host_path", "storage_path"),
    "directory": ("type", "container_path"),
}
_CKPT_SAVE = ("save_experiment_best", "save_trial_best", "save_trial_latest")
_CKPT_REMOTE = ("s3", "gcs", "azure")
_SHARED_FS_IGNORED = {
    "propagation": "ignored: bind propagation is a Docker setting",
    **{key: "ignored: dethpc's jobs read and write checkpoints at host_path "
            "(+ storage_path) directly" for key in (
        "container_path", "checkpoint_path", "tensorboard_path")},
}
_MAX_SEED = 2**31 - 1
_COMPONENT_KEYS = ("name", "entrypoint", "nodes", "tasks_per_node", "cpus_per_task",
                   "resource_pool", "ready", "ready_timeout")
_COMPONENT_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_READY_CHECKS = ("port", "file", "none")
_PROPAGATION = "ignored: bind propagation is a Docker setting"


# ------------------------------------------------------------------------ public
def parse_experiment_config(raw: dict[str, Any],
                            source: str = "experiment config") -> ExperimentConfig:
    """Validate a raw experiment config; raise ``ConfigError`` listing every problem.

    Determined 0.38.1's verdict (``dethpc.config.expconf``) decides what is valid;
    dethpc's own parsing below builds the model. Where dethpc's parser cannot take
    a value that Determined accepts, the config stays valid: a warning names the
    field and ``submit`` refuses it (``cfg.unsupported``, ``check_supported``)."""
    ck = Checker()
    if not isinstance(raw, dict):
        what = "the file is empty" if raw is None else f"got {show(raw)}"
        ck.error("", f"expected a mapping with at least entrypoint and searcher; {what}")
        ck.raise_if_errors(source)
    det = verdict(raw)
    ck.keys(raw, "", _TOP_LEVEL, _IGNORED_TOP)
    if raw.get("records_per_epoch"):
        ck.warn("records_per_epoch", "ignored: dethpc's Trainer counts an epoch as one pass "
                                     "of the training data loader; lengths are not converted "
                                     "with records_per_epoch")
    hparams = parse_hparams(ck, raw.get("hyperparameters"))
    cfg = ExperimentConfig(
        name=str(ck.string(raw.get("name"), "name", "experiment")),
        entrypoint=_entrypoint(ck, raw),
        searcher=parse_searcher(ck, raw.get("searcher"), hparams),
        hyperparameters=hparams,
        description=str(ck.string(raw.get("description"), "description", "", nonempty=False)),
        labels=ck.string_list(raw.get("labels"), "labels"),
        resources=_resources(ck, raw.get("resources")),
        checkpoint_storage=_checkpoint_storage(ck, raw.get("checkpoint_storage")),
        environment=_environment(ck, raw.get("environment")),
        bind_mounts=_bind_mounts(ck, raw.get("bind_mounts")),
        max_restarts=int(ck.integer(raw.get("max_restarts"), "max_restarts", 5, minimum=0)),
        min_validation_period=_period(ck, raw.get("min_validation_period"),
                                      "min_validation_period"),
        min_checkpoint_period=_period(ck, raw.get("min_checkpoint_period"),
                                      "min_checkpoint_period"),
        records_per_epoch=ck.integer(raw.get("records_per_epoch") or None, "records_per_epoch",
                                     None, minimum=1),
        experiment_seed=_seed(ck, raw.get("reproducibility")),
        slurm=_slurm(ck, raw.get("slurm")),
        data=ck.mapping(raw.get("data"), "data"),
        raw=copy.deepcopy(raw),
    )
    errors, unsupported = _judge(det, ck)
    if errors:
        raise ConfigError(errors, source)
    notes = [f"{e.path}: dethpc cannot serve this value ({e.message}); `submit` refuses it"
             for e in unsupported]
    return replace(cfg, warnings=tuple(dict.fromkeys((*det.warnings, *ck.warnings, *notes))),
                   unsupported=tuple(ck.unsupported) + tuple(unsupported))


def check_supported(cfg: ExperimentConfig) -> None:
    """Refuse (at submit) what validation only warned about: valid Determined values
    dethpc cannot honour on Slurm, each with its field path and the reason."""
    if cfg.unsupported:
        raise ConfigError([FieldError(e.path, f"not supported on dethpc: {e.message}")
                           for e in cfg.unsupported], "experiment config (submit)")


def _judge(det: Verdict, ck: Checker) -> tuple[list[FieldError], list[FieldError]]:
    """Merge Determined's verdict with dethpc's parser: (errors, unsupported).

    - dethpc and Determined both object at a path (or one inside the other):
      dethpc's message stays (it names dethpc's allowed forms), Determined's goes;
    - only dethpc objects, at a Determined field: Determined accepts the value,
      so it is valid but unsupported here (refused at submit);
    - only dethpc objects, at a dethpc-only field (``slurm.time``, ...): an error;
    - only Determined objects: an error."""
    def near(a: str, b: str) -> bool:
        return a == b or _under(a, b) or _under(b, a)

    errors: list[FieldError] = []
    unsupported: list[FieldError] = []
    for mine in ck.errors:
        if any(near(mine.path, d.path) for d in det.errors) or not det.is_determined(mine.path):
            errors.append(mine)
        else:
            unsupported.append(mine)
    kept = [d for d in det.errors if not any(near(m.path, d.path) for m in errors)]
    return kept + errors, unsupported


def _under(path: str, parent: str) -> bool:
    if not parent:
        return bool(path)
    return path.startswith(parent + ".") or path.startswith(parent + "[")


def load_experiment_config(path: str | Path,
                           overrides: Sequence[str] = ()) -> ExperimentConfig:
    """Read a YAML file, apply ``--config key=value`` overrides, then validate."""
    source = str(path)
    raw = load_yaml_file(path)
    if overrides:
        if not isinstance(raw, dict):
            parse_experiment_config(raw, source)  # raises the "expected a mapping" error
        raw = apply_overrides(raw, overrides)
    return parse_experiment_config(raw, source)


def dump_config(raw: dict[str, Any]) -> str:
    """YAML text of a raw config (keys in their given order; round-trips)."""
    return dump_yaml(raw)


# ---------------------------------------------------------------------- sections
def _entrypoint(ck: Checker, raw: dict[str, Any]) -> str | tuple[str, ...]:
    value = ck.required(raw, "entrypoint", "",
                        "e.g. 'python3 train.py' or 'model_def:TrialClass'")
    return _command(ck, value, "entrypoint")


def _command(ck: Checker, value: Any, path: str) -> str | tuple[str, ...]:
    """A command as a shell-like string or an argv list; "" when missing or bad."""
    if value is None:
        return ""
    if isinstance(value, list):
        if not value:
            ck.error(path, "expected a non-empty list of strings (argv), got []")
        # an argv word may be empty ("--prefix", ""): dropping it would shift the others
        return ck.string_list(value, path, nonempty=False)
    text = str(ck.string(value, path, ""))
    try:
        shlex.split(text)
    except ValueError as exc:
        ck.error(path, f"cannot split {text!r} into words like a shell does ({exc}); "
                       "fix the quoting or give a list of strings")
    return text


def _period(ck: Checker, value: Any, path: str) -> Length | None:
    """A min_*_period; Determined's default ``{batches: 0}`` (any unit, 0) means none."""
    if isinstance(value, dict) and len(value) == 1 and next(iter(value.values())) == 0:
        return None
    return parse_length(ck, value, path)


def _resources(ck: Checker, value: Any) -> ResourcesConfig:
    data = ck.mapping(value, "resources")
    ck.keys(data, "resources", _RESOURCES, _RESOURCES_IGNORED)
    for key, why in _RESOURCES_UNUSED.items():
        if data.get(key) is not None:
            ck.warn(join("resources", key), why)
    return ResourcesConfig(
        slots_per_trial=int(ck.integer(data.get("slots_per_trial"),
                                       "resources.slots_per_trial", 1, minimum=1)),
        resource_pool=ck.string(data.get("resource_pool"), "resources.resource_pool", None),
        max_slots=ck.integer(data.get("max_slots"), "resources.max_slots", None, minimum=1),
        priority=ck.integer(data.get("priority"), "resources.priority", None),
    )


def _checkpoint_storage(ck: Checker, value: Any) -> CheckpointStorage:
    path = "checkpoint_storage"
    data = ck.mapping(value, path)
    if not data:
        return CheckpointStorage()
    saves = {key: int(ck.integer(data.get(key), join(path, key), default, minimum=0))
             for key, default in zip(_CKPT_SAVE, (0, 1, 1), strict=True)}
    kind = data.get("type")
    if kind is None:
        # only the GC counts: checkpoints stay in the trial's run directory
        for key in data:
            if key not in _CKPT_SAVE:
                ck.unsupported_here(join(path, str(key)),
                                    "without a type, Determined merges this into the "
                                    "cluster's default storage; dethpc's default is the "
                                    "trial's run directory: give type shared_fs or directory")
        return CheckpointStorage(**saves)  # type: ignore[arg-type]
    if kind in _CKPT_REMOTE:
        ck.unsupported_here(join(path, "type"),
                            f"checkpoint storage type {kind!r} is valid in Determined but "
                            "dethpc writes checkpoints as files on the cluster's filesystem; "
                            "use type shared_fs (host_path) or directory (container_path)")
        return CheckpointStorage(**saves)  # type: ignore[arg-type]
    kind = ck.choice(kind, join(path, "type"), tuple(_CKPT_FIELDS), None)
    if kind is None:
        return CheckpointStorage()
    ignored = _SHARED_FS_IGNORED if kind == "shared_fs" else None
    ck.keys(data, path, _CKPT_FIELDS[kind] + _CKPT_SAVE, ignored)
    location = (_shared_fs_path(ck, data, path) if kind == "shared_fs"
                else _absolute(ck, data, "container_path", path))
    return CheckpointStorage(type=kind, path=location, **saves)  # type: ignore[arg-type]


def _shared_fs_path(ck: Checker, data: dict[str, Any], path: str) -> Path | None:
    """host_path, or host_path/storage_path (normalized; Determined's expconf has
    already refused a storage_path that leaves host_path)."""
    host = _absolute(ck, data, "host_path", path)
    storage = ck.string(data.get("storage_path"), join(path, "storage_path"), None)
    if host is None or storage is None:
        return host
    sub = Path(posixpath.normpath(storage))
    if not sub.is_absolute():
        return host / sub
    if sub != host and host not in sub.parents:
        ck.error(join(path, "storage_path"),
                 f"absolute storage_path {storage!r} must lie inside host_path {str(host)!r}; "
                 "or give a path relative to host_path")
    return sub


def _absolute(ck: Checker, data: dict[str, Any], key: str, path: str) -> Path | None:
    sub = join(path, key)
    text = ck.string(ck.required(data, key, path, "an absolute path"), sub, None)
    if text is None:
        return None
    location = Path(text).expanduser()
    if not location.is_absolute():
        ck.error(sub, f"expected an absolute path, got {text!r}")
        return None
    return location


def _environment(ck: Checker, value: Any) -> EnvironmentConfig:
    path = "environment"
    data = ck.mapping(value, path)
    ck.keys(data, path, _ENVIRONMENT, _ENVIRONMENT_IGNORED)
    image, image_gpu = _image(ck, data.get("image"), join(path, "image"))
    env, env_gpu = _env_vars(ck, data.get("environment_variables"),
                             join(path, "environment_variables"))
    return EnvironmentConfig(image=image, image_gpu=image_gpu, environment_variables=env,
                             environment_variables_gpu=env_gpu)


def _image(ck: Checker, value: Any, path: str) -> tuple[str | None, str | None]:
    if not isinstance(value, dict):
        return ck.string(value, path, None), None
    ck.keys(value, path, _DEVICE_KEYS)
    images = {k: ck.string(value.get(k), join(path, k), None) for k in _DEVICE_KEYS}
    gpu = images["cuda"] or images["gpu"] or images["rocm"]
    return images["cpu"], gpu


def _env_vars(ck: Checker, value: Any,
              path: str) -> tuple[dict[str, str], dict[str, str] | None]:
    if not isinstance(value, dict):
        return _env_list(ck, value, path), None
    ck.keys(value, path, _DEVICE_KEYS)
    cpu = _env_list(ck, value.get("cpu"), join(path, "cpu"))
    gpu_key = next((k for k in ("cuda", "gpu", "rocm") if value.get(k) is not None), None)
    if gpu_key is None:
        return cpu, None
    return cpu, _env_list(ck, value[gpu_key], join(path, gpu_key))


def _env_list(ck: Checker, value: Any, path: str) -> dict[str, str]:
    """``["K=V", ...]`` -> dict. Values are free text: the renderer shell-quotes them."""
    if value is None:
        return {}
    if not isinstance(value, list):
        ck.error(path, f"expected a list of 'NAME=value' strings, got {show(value)}")
        return {}
    env: dict[str, str] = {}
    for i, item in enumerate(value):
        name, sep, val = item.partition("=") if isinstance(item, str) else ("", "", "")
        if not sep or not _ENV_NAME.match(name):
            ck.error(join(path, i), f"expected 'NAME=value' with NAME matching "
                                    f"[A-Za-z_][A-Za-z0-9_]*, got {show(item)}")
            continue
        if shell_owned(name):
            ck.error(join(path, i), f"{name} is set by bash itself in the job script "
                                    "(read-only or overwritten), so it cannot be passed; "
                                    "allowed: any other name")
            continue
        env[name] = val
    return env


def _bind_mounts(ck: Checker, value: Any) -> tuple[BindMount, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        ck.error("bind_mounts", f"expected a list of mappings, got {show(value)}")
        return ()
    mounts = [_bind_mount(ck, item, join("bind_mounts", i)) for i, item in enumerate(value)]
    return tuple(m for m in mounts if m is not None)


def _bind_mount(ck: Checker, value: Any, path: str) -> BindMount | None:
    if not isinstance(value, dict):
        ck.error(path, f"expected a mapping with host_path and container_path, got {show(value)}")
        return None
    ck.keys(value, path, ("host_path", "container_path", "read_only"),
            {"propagation": _PROPAGATION})
    host = _absolute(ck, value, "host_path", path)
    container = ck.string(value.get("container_path"), join(path, "container_path"), None)
    if container is not None and not PurePosixPath(container).is_absolute():
        ck.error(join(path, "container_path"), f"expected an absolute path, got {container!r}")
        container = None
    elif container is None and value.get("container_path") is None:
        ck.error(join(path, "container_path"), "required; an absolute path")
    read_only = ck.boolean(value.get("read_only"), join(path, "read_only"), False)
    if host is None or container is None:
        return None
    return BindMount(str(host), container, read_only)


def _seed(ck: Checker, value: Any) -> int:
    data = ck.mapping(value, "reproducibility")
    ck.keys(data, "reproducibility", ("experiment_seed",))
    return int(ck.integer(data.get("experiment_seed"), "reproducibility.experiment_seed", 0,
                          minimum=0, maximum=_MAX_SEED))


def _slurm(ck: Checker, value: Any) -> SlurmSection:
    data = ck.mapping(value, "slurm")
    ck.keys(data, "slurm", ("sbatch_args", "gpu_type", "slots_per_node", "time", "components",
                            "workers", "bad_nodes", "watchdog", "stragglers"))
    return SlurmSection(
        sbatch_args=sbatch_args(ck, data.get("sbatch_args"), "slurm.sbatch_args"),
        gpu_type=ck.string(data.get("gpu_type"), "slurm.gpu_type", None),
        slots_per_node=ck.integer(data.get("slots_per_node"), "slurm.slots_per_node", None,
                                  minimum=1),
        time=sbatch_time(ck, data.get("time"), "slurm.time"),
        components=_components(ck, data.get("components")),
        workers=parse_workers(ck, data.get("workers"), "slurm.workers"),
        bad_nodes=_bad_nodes(ck, data.get("bad_nodes")),
        watchdog=_watchdog(ck, data.get("watchdog")),
        stragglers=_stragglers(ck, data.get("stragglers")),
    )


def _stragglers(ck: Checker, value: Any) -> Stragglers:
    """``slurm.stragglers``: ``{behind_pct: P}`` (``0`` turns the view off)."""
    if value is None:
        return Stragglers()
    data = ck.mapping(value, "slurm.stragglers")
    ck.keys(data, "slurm.stragglers", ("behind_pct",))
    return Stragglers(behind_pct=float(ck.number(
        data.get("behind_pct"), "slurm.stragglers.behind_pct", Stragglers().behind_pct,
        minimum=0)))


def _watchdog(ck: Checker, value: Any) -> Watchdog:
    """``slurm.watchdog``: ``false`` (off), or ``{max_idle_s: auto | seconds | 0,
    startup_s: seconds, output: bool}``."""
    path = "slurm.watchdog"
    if value is None or value is True:
        return Watchdog()
    if value is False:
        return Watchdog(max_idle_s=0)
    data = ck.mapping(value, path)
    ck.keys(data, path, ("max_idle_s", "startup_s", "output"))
    raw = data.get("max_idle_s")
    max_idle: float | None = None
    if isinstance(raw, str) and raw != "auto":
        ck.error(f"{path}.max_idle_s", f"expected auto, 0 (off) or seconds, got {raw!r}")
    elif raw is not None and raw != "auto":
        max_idle = float(ck.number(raw, f"{path}.max_idle_s", 0.0, minimum=0))
    startup = float(ck.number(data.get("startup_s"), f"{path}.startup_s",
                              Watchdog().startup_s, above=0))
    output = ck.boolean(data.get("output"), f"{path}.output", False)
    return Watchdog(max_idle_s=max_idle, startup_s=startup, output=output)


def _bad_nodes(ck: Checker, value: Any) -> BadNodes:
    """``slurm.bad_nodes``: ``{failures: N, window_s: S}`` (``failures: 0`` turns it off)."""
    if value is None:
        return BadNodes()
    data = ck.mapping(value, "slurm.bad_nodes")
    ck.keys(data, "slurm.bad_nodes", ("failures", "window_s"))
    default = BadNodes()
    return BadNodes(
        failures=int(ck.integer(data.get("failures"), "slurm.bad_nodes.failures",
                                default.failures, minimum=0)),
        window_s=int(ck.integer(data.get("window_s"), "slurm.bad_nodes.window_s",
                                default.window_s, minimum=1)))


def _components(ck: Checker, value: Any) -> tuple[HetComponent, ...]:
    """``slurm.components``: the extra parts of a heterogeneous job (docs/launchers.md)."""
    path = "slurm.components"
    if value is None:
        return ()
    if not isinstance(value, list):
        ck.error(path, f"expected a list of components, got {show(value)}")
        return ()
    out: list[HetComponent] = []
    seen: set[str] = set()
    for index, item in enumerate(value):
        where = join(path, index)
        data = ck.mapping(item, where)
        if not data:
            if isinstance(item, dict):
                ck.error(where, "a component needs at least a name and an entrypoint")
            continue
        ck.keys(data, where, _COMPONENT_KEYS)
        name = str(ck.required(data, "name", where, "e.g. 'server'") or "")
        if name and (not _COMPONENT_NAME.match(name) or name == "trial"):
            ck.error(join(where, "name"), f"{show(data.get('name'))} is not allowed: use "
                     "lower-case letters, digits and '_', starting with a letter; 'trial' "
                     "is the trial's own part")
        elif name in seen:
            ck.error(join(where, "name"), f"{name!r} is used by another component")
        seen.add(name)
        entry = _command(ck, ck.required(data, "entrypoint", where, "e.g. 'python3 server.py'"),
                         join(where, "entrypoint"))
        counts = {key: int(ck.integer(data.get(key), join(where, key), 1, minimum=1))
                  for key in ("nodes", "tasks_per_node", "cpus_per_task")}
        out.append(HetComponent(
            name=name, entrypoint=entry, **counts,
            resource_pool=ck.string(data.get("resource_pool"), join(where, "resource_pool"),
                                    None),
            ready=ck.choice(data.get("ready"), join(where, "ready"), _READY_CHECKS,
                            "port"),  # type: ignore[arg-type]
            ready_timeout_s=int(ck.integer(data.get("ready_timeout"),
                                           join(where, "ready_timeout"), 300, minimum=1))))
    return tuple(out)
