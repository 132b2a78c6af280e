"""Determined 0.38.1's verdict on an experiment config, from its expconf v0 schemas.

Owns: the rules of ``schemas/expconf/v0/*.json`` in determined-ai/determined at
v0.38.1 (commit 6bcda5dd3426ce682ea54e2b55115aa9478dbe0e), declared with the rule
objects of ``dethpc.config._rules`` one schema per name (``SCHEMAS``, keyed by the
schema's file name without ``.json``), and ``verdict``: the sanity check, the
completeness check (``eventuallyRequired`` once dethpc's defaults are in) and the
master's own checks at experiment creation (``core_experiment.go``: managed
experiments need an entrypoint; ``searcher_config.go`` ``AssertCurrent``: EOL
searchers refused, ASHA needs ``time_metric`` + ``max_time``, deprecation warnings).
Must not: decide what dethpc can run (``dethpc.config.experiment`` does, on top of
this verdict), read files, or carry the JSON files themselves.

Deliberate differences from Determined, each written here and in docs/config.md:
- ``adaptive_asha``/``async_halving`` with only the legacy ``max_length``: Determined
  0.38.1 refuses new experiments like that; dethpc keeps them working (the issue's
  "legacy max_length keeps working") with Determined's deprecation warning.
- The top-level ``eventuallyRequired`` fields with a dethpc default (``name``,
  ``hyperparameters``, ``reproducibility``, ``checkpoint_storage``,
  ``environment.image``) are not required: Determined's master fills them too.
- dethpc's own keys (``slurm.time``, ``slurm.components``, ``searcher.stop_grace_s``
  and options of registered searchers) are left to dethpc's parser.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from dethpc.common.errors import FieldError
from dethpc.config._check import is_number, join
from dethpc.config._rules import (
    All,
    AnyV,
    Arr,
    Bool,
    Ctx,
    Enum,
    Int,
    Lazy,
    Map,
    Null,
    Num,
    Obj,
    Rule,
    Str,
    Tagged,
    Union,
    always,
    is_type,
    never,
)

SOURCE_COMMIT = "6bcda5dd3426ce682ea54e2b55115aa9478dbe0e"  # tag v0.38.1
UNITS = ("batches", "records", "epochs")
_LENGTH_MSG = 'a length object must have one attribute named "batches", "records", or "epochs"'
DEPRECATED_MAX_LENGTH = ("the `max_length` field of the searcher config has been deprecated "
                         "and will be removed in a future release.")
DEPRECATED_STOP_ONCE = ("the `stop_once` field of the searcher config has been deprecated "
                        "and will be removed in a future release.")
#: searchers Determined 0.38 still parses but refuses for new experiments (AssertCurrent)
EOL_SEARCHERS = ("sync_halving", "adaptive", "adaptive_simple", "custom")


# ------------------------------------------------------------------------ lengths
@dataclass
class _Length(Rule):
    """length.json (``minimum`` 0) and check-positive-length.json (``minimum`` 1)."""

    minimum: int = 0

    def check(self, value: Any, path: str, cx: Ctx) -> None:
        if not isinstance(value, dict) or len(value) != 1 or next(iter(value)) not in UNITS:
            cx.error(path, f"{_LENGTH_MSG}, got {value!r}")
            return
        (unit, count), = value.items()
        Int(minimum=self.minimum).check(count, join(path, unit), cx)


LENGTH = _Length(0)
POSITIVE_LENGTH = _Length(1)
#: searcher-length.json: a positive Length or an integer >= 0
SEARCHER_LENGTH = Union([(lambda v: not isinstance(v, dict), Int(minimum=0)),
                         (always, POSITIVE_LENGTH)])


# ---------------------------------------------------------------- hyperparameters
def _less(a: str, b: str, or_equal: bool = False) -> Any:
    """compareProperties a<b (a<=b): only when both are numbers, as the Go code."""
    def fn(obj: Mapping[str, Any], path: str) -> list[tuple[str, str]]:
        x: Any = obj.get(a)
        y: Any = obj.get(b)
        if not (is_number(x) and is_number(y)):
            return []
        bad = float(x) > float(y) if or_equal else float(x) >= float(y)
        return [(path, f"{a} must be less than {b} (got {a} {x!r}, {b} {y!r})")] if bad else []
    return fn


_COUNT = Int(minimum=1)
_HP_TYPES = ("int", "double", "log", "const", "categorical")
HP_INT = Obj({"type": Enum(("int",)), "minval": Int(), "maxval": Int(), "count": _COUNT},
             required=("type", "minval", "maxval"), checks=(_less("minval", "maxval"),))
HP_DOUBLE = Obj({"type": Enum(("double",)), "minval": Num(), "maxval": Num(), "count": _COUNT},
                required=("type", "minval", "maxval"), checks=(_less("minval", "maxval"),))
HP_LOG = Obj({"type": Enum(("log",)), "minval": Num(), "maxval": Num(), "base": Num(above=0),
              "count": _COUNT},
             required=("type", "minval", "maxval", "base"), checks=(_less("minval", "maxval"),))
HP_CONST = Obj({"type": Enum(("const",)), "val": AnyV()}, required=("type", "val"))
HP_CATEGORICAL = Obj({"type": Enum(("categorical",)), "vals": Arr(AnyV())},
                     required=("type", "vals"))


@dataclass
class _Hyperparameter(Rule):
    """hyperparameter.json: a typed leaf, a nested group (an object without ``type``)
    or any other value (a constant)."""

    def check(self, value: Any, path: str, cx: Ctx) -> None:
        if not isinstance(value, dict):
            cx.free.add(path)
            return
        if "type" not in value:
            HYPERPARAMETERS.check(value, path, cx)
            return
        Tagged("type", {"int": HP_INT, "double": HP_DOUBLE, "log": HP_LOG, "const": HP_CONST,
                        "categorical": HP_CATEGORICAL}).check(value, path, cx)


HYPERPARAMETER = _Hyperparameter()
HYPERPARAMETERS = Map(Lazy(lambda: HYPERPARAMETER))


def grid_counts(tree: Any, path: str) -> list[tuple[str, str]]:
    """check-grid-hyperparameter.json: with the grid searcher, every int/double/log
    hyperparameter needs a ``count`` (nested groups and lists included)."""
    out: list[tuple[str, str]] = []
    if isinstance(tree, list):
        for index, item in enumerate(tree):
            out += grid_counts(item, join(path, index))
    elif isinstance(tree, dict) and "type" not in tree:
        for key, item in tree.items():
            out += grid_counts(item, join(path, str(key)))
    elif isinstance(tree, dict) and tree.get("type") in ("double", "log", "int") and \
            tree.get("count") is None:
        out.append((join(path, "count"), "grid search is in use but count was not provided"))
    return out


# ----------------------------------------------------------------------- searcher
def _dethpc_searcher_keys() -> Iterable[str]:
    import dethpc.config.searcher_registry as registry

    return [k for k in (*registry.COMMON_KEYS, *registry.option_keys())
            if k not in SEARCHER_PROPS]


def _dethpc_searcher_names() -> Iterable[str]:
    import dethpc.config.searcher_registry as registry

    return registry.names()


_COMMON = {"metric": Str(), "smaller_is_better": Bool(), "source_trial_id": Int(),
           "source_checkpoint_uuid": Str()}
_MODE = Enum(("aggressive", "standard", "conservative"))
_DIVISOR = Num(above=1)
_MAX_CONCURRENT = Int(minimum=0)


def _searcher(name: str, props: Mapping[str, Rule], eventually: tuple[str, ...],
              extra: Rule | None = None) -> Obj:
    return Obj({"name": Enum((name,)), **_COMMON, **props}, required=("name",),
               eventually=eventually, extra=extra, ext=_dethpc_searcher_keys)


SEARCHERS: dict[str, Rule] = {
    "single": _searcher("single", {"max_length": SEARCHER_LENGTH}, ("metric",)),
    "random": _searcher("random", {"max_concurrent_trials": _MAX_CONCURRENT,
                                   "max_trials": Int(minimum=1),
                                   "max_length": SEARCHER_LENGTH}, ("max_trials", "metric")),
    "grid": _searcher("grid", {"max_concurrent_trials": _MAX_CONCURRENT,
                               "max_length": SEARCHER_LENGTH}, ("metric",)),
    "adaptive_asha": _searcher("adaptive_asha", {
        "bracket_rungs": Arr(Int()), "max_trials": Int(minimum=1), "time_metric": Str(),
        "max_time": Int(), "mode": _MODE, "divisor": _DIVISOR, "max_rungs": Int(minimum=1),
        "max_concurrent_trials": _MAX_CONCURRENT, "max_length": SEARCHER_LENGTH,
        "stop_once": Bool()}, ("max_trials", "metric")),
    "async_halving": _searcher("async_halving", {
        "num_rungs": Int(minimum=1), "max_length": POSITIVE_LENGTH,
        "max_trials": Int(minimum=1), "divisor": _DIVISOR,
        "max_concurrent_trials": _MAX_CONCURRENT, "stop_once": Bool(), "time_metric": Str(),
        "max_time": Int()}, ("num_rungs", "max_trials", "metric")),
    "custom": _searcher("custom", {"unit": Enum(UNITS)}, ("metric",), extra=AnyV()),
    "adaptive": _searcher("adaptive", {
        "budget": LENGTH, "bracket_rungs": Arr(Int()), "mode": _MODE, "divisor": _DIVISOR,
        "max_rungs": Int(minimum=1), "max_length": POSITIVE_LENGTH,
        "train_stragglers": Bool()}, ("budget", "metric")),
    "adaptive_simple": _searcher("adaptive_simple", {
        "max_trials": Int(minimum=1, maximum=2000), "mode": _MODE, "divisor": _DIVISOR,
        "max_rungs": Int(minimum=1), "max_length": POSITIVE_LENGTH}, ("max_trials", "metric")),
    "sync_halving": _searcher("sync_halving", {
        "budget": POSITIVE_LENGTH, "num_rungs": Int(minimum=1), "max_length": POSITIVE_LENGTH,
        "divisor": _DIVISOR, "train_stragglers": Bool()}, ("num_rungs", "budget", "metric")),
}
#: searcher.json's own properties (the union of every searcher's keys)
SEARCHER_PROPS = ("bracket_rungs", "divisor", "max_concurrent_trials", "max_length",
                  "max_rungs", "max_time", "time_metric", "max_trials", "mode", "name",
                  "num_rungs", "stop_once", "metric", "smaller_is_better", "source_trial_id",
                  "source_checkpoint_uuid", "budget", "train_stragglers", "unit")
_SEARCHER_BASE = Obj({**{k: AnyV() for k in SEARCHER_PROPS}, **_COMMON},
                     eventually=("name", "metric"), ext=_dethpc_searcher_keys)
SEARCHER = Tagged("name", SEARCHERS, base=_SEARCHER_BASE, foreign=_dethpc_searcher_names)


# -------------------------------------------------------------- checkpoint storage
_SAVES = {"save_experiment_best": Int(minimum=0), "save_trial_best": Int(minimum=0),
          "save_trial_latest": Int(minimum=0)}
_PREFIX = Str(pattern=r"^(?!\.\.$)(?!\.\./)(?!.*/\.\./)(?!.*/\.\.$)",
              why="prefix cannot contain /../")


def _subdir(obj: Mapping[str, Any], path: str) -> list[tuple[str, str]]:
    """shared-fs.json's check (compareProperties a_is_subdir_of_b, as the Go code)."""
    storage, host = obj.get("storage_path"), obj.get("host_path")
    if not isinstance(storage, str) or not isinstance(host, str):
        return []
    a, b = posixpath.normpath(storage), posixpath.normpath(host)
    bad = not a.startswith(b) if posixpath.isabs(a) else a.startswith("..")
    if not bad:
        return []
    return [(join(path, "storage_path"),
             "storage_path must either be a relative directory or a subdirectory of host_path "
             f"(got {storage!r}, host_path {host!r})")]


def _azure_one_of(obj: Mapping[str, Any], path: str) -> list[tuple[str, str]]:
    if obj.get("connection_string") is not None and obj.get("credential") is not None:
        return [(path, "credential and connection_string must not both be set")]
    return []


def _azure_exactly_one(obj: Mapping[str, Any], path: str) -> list[tuple[str, str]]:
    given = [k for k in ("connection_string", "account_url") if obj.get(k) is not None]
    if len(given) != 1:
        return [(path, "Exactly one of connection_string or account_url must be set")]
    return []


def _storage(kind: str, props: Mapping[str, Rule], eventually: tuple[str, ...],
             checks: tuple[Any, ...] = ()) -> Obj:
    return Obj({"type": Enum((kind,)), **props, **_SAVES}, required=("type",),
               eventually=eventually, checks=checks)


SHARED_FS = _storage("shared_fs", {k: Str() for k in (
    "host_path", "storage_path", "propagation", "container_path", "checkpoint_path",
    "tensorboard_path")}, ("host_path",), (_subdir,))
DIRECTORY = _storage("directory", {"container_path": Str()}, ("container_path",))
S3 = _storage("s3", {"access_key": Str(), "bucket": Str(), "secret_key": Str(),
                     "endpoint_url": Str(), "prefix": _PREFIX}, ("bucket",))
GCS = _storage("gcs", {"bucket": Str(), "prefix": _PREFIX}, ("bucket",))
AZURE = _storage("azure", {"container": Str(), "connection_string": Str(), "account_url": Str(),
                           "credential": Str()}, ("container",), (_azure_one_of,))
STORAGES: dict[str, Rule] = {"shared_fs": SHARED_FS, "directory": DIRECTORY, "s3": S3,
                             "gcs": GCS, "azure": AZURE}
_STORAGE_PROPS = ("access_key", "account_url", "bucket", "checkpoint_path", "connection_string",
                  "container", "container_path", "credential", "endpoint_url", "prefix",
                  "host_path", "propagation", "secret_key", "storage_path", "tensorboard_path",
                  "type", "user")
CHECKPOINT_STORAGE = Tagged("type", STORAGES, base=Obj(
    {**{k: AnyV() for k in _STORAGE_PROPS}, **_SAVES}))
_DEPRECATED = "this field is deprecated and will be ignored"
TENSORBOARD_STORAGE = Union([(never, SHARED_FS), (never, S3), (never, GCS)], _DEPRECATED)


@dataclass
class _AzureComplete(Rule):
    """azure.json's ``eventually`` check (only when checking completeness)."""

    def check(self, value: Any, path: str, cx: Ctx) -> None:
        if cx.complete and isinstance(value, dict):
            for where, message in _azure_exactly_one(value, path):
                cx.error(where, message)


STORAGES["azure"] = All((AZURE, _AzureComplete()))


# ---------------------------------------------------------------------- resources
_SHM = r"^([0-9]*[.])?[0-9]+ ?(([kmgtpKMGTP]([iI]?[bB])?)|[bB])?$"
DEVICE = Union([(never, Obj({"host_path": Str(), "container_path": Str(), "mode": Str()},
                            required=("host_path", "container_path"))),
                (never, Str(pattern=r"^/[^:]*:/[^:]*(:[rwm]*)?"))],
               "is neither a list of --device strings nor a map containing host_path, "
               "container_path, and mode")
RESOURCES = Obj({
    "agent_label": Str(), "devices": Arr(DEVICE), "is_single_node": Bool(),
    "max_slots": Int(), "native_parallel": Bool(), "priority": Int(minimum=1, maximum=99),
    "resource_pool": Str(),
    "shm_size": Union([(is_type(int), Int()),
                       (is_type(str), Str(pattern=_SHM, why="must be a valid memory size"))],
                      "expected an integer or a memory size string"),
    "slots": Int(), "slots_per_trial": Int(minimum=0), "weight": Num()})


# -------------------------------------------------------------------- environment
_NOT_CONFIGURABLE = {
    "image": "container Image is not configurable, set it in the experiment config",
    "command": "container Command is not configurable",
    "args": "container Args are not configurable",
    "working_dir": "container WorkingDir is not configurable",
    "ports": "container Ports are not configurable",
    "liveness_probe": "container LivenessProbe is not configurable",
    "readiness_probe": "container ReadinessProbe is not configurable",
    "startup_probe": "container StartupProbe is not configurable",
    "lifecycle": "container Lifecycle is not configurable",
    "termination_message_path": "container TerminationMessagePath is not configurable",
    "termination_message_policy": "container TerminationMessagePolicy is not configurable",
    "image_pull_policy": "container ImagePullPolicy is not configurable, set it in the "
                         "experiment config",
    "security_context": "container SecurityContext is not configurable, set it in the "
                        "experiment config",
}


@dataclass
class _Container(Rule):
    """A pod_spec container: Determined's own (``determined-container``) is not yours."""

    def check(self, value: Any, path: str, cx: Ctx) -> None:
        cx.free.add(path)
        if isinstance(value, dict) and value.get("name") == "determined-container":
            Obj({}, extra=AnyV(), disallow=_NOT_CONFIGURABLE).check(value, path, cx)


POD_SPEC = Obj({"spec": Obj({"containers": Arr(_Container())}, extra=AnyV())}, extra=AnyV(),
               disallow={"name": "pod Name is not a configurable option",
                         "name_space": "pod NameSpace is not a configurable option"})
_STRINGS = Arr(Str())
IMAGE = Union([(never, Obj({k: Str() for k in ("cpu", "cuda", "rocm", "gpu")})),
               (never, Str())],
              "is neither a string nor a map of cpu, cuda, or rocm to strings")
ENV_VARS = Union([(never, Obj({k: _STRINGS for k in ("cpu", "cuda", "rocm", "gpu")})),
                  (never, _STRINGS)],
                 "is neither a list of strings nor a map of cpu, cuda, or rocm to lists of "
                 "strings")
ENVIRONMENT = Obj({
    "image": IMAGE, "environment_variables": ENV_VARS,
    "proxy_ports": Arr(Obj({"proxy_port": Num(), "proxy_tcp": Bool(), "unauthenticated": Bool(),
                            "default_service_id": Bool()}, required=("proxy_port",))),
    "ports": Map(Int()), "force_pull_image": Bool(),
    "registry_auth": Obj({k: Str() for k in ("username", "password", "auth", "email",
                                              "serveraddress", "identitytoken",
                                              "registrytoken")}),
    "add_capabilities": _STRINGS, "drop_capabilities": _STRINGS, "pod_spec": POD_SPEC})


# ------------------------------------------------------------------- the rest
BIND_MOUNT = Obj({
    "host_path": Str(pattern="^/", why="host_path must be an absolute path"),
    "container_path": Str(forbid={".": 'container_path must not be "."'}),
    "read_only": Bool(), "propagation": Str()}, required=("host_path", "container_path"))
_LOG_ACTION = Union([(never, Enum(("cancel_retries",))), (never, Enum(("exclude_node",))),
                     (lambda v: isinstance(v, dict) and v.get("type") == "cancel_retries",
                      Obj({"type": Enum(("cancel_retries",))}, required=("type",))),
                     (lambda v: isinstance(v, dict) and v.get("type") == "exclude_node",
                      Obj({"type": Enum(("exclude_node",))}, required=("type",)))],
                    'must be one of "cancel_retries" or "exclude_node"')


def _log_policy_check(obj: Mapping[str, Any], path: str) -> list[tuple[str, str]]:
    if "name" in obj or ("pattern" in obj and "action" in obj):
        return []
    return [(path, '"name" must be set, and "pattern" is also required unless you intend to '
                   'disable an existing policy')]


LOG_POLICY = Obj({"name": Str(), "pattern": Str(), "action": _LOG_ACTION},
                 checks=(_log_policy_check,))
PROFILING = Obj({"enabled": Bool(), "begin_on_batch": Int(minimum=0),
                 "end_after_batch": Int(minimum=0), "sync_timings": Bool()},
                checks=(_less("begin_on_batch", "end_after_batch", or_equal=True),))
OPTIMIZATIONS = Obj({
    "aggregation_frequency": Int(minimum=1), "auto_tune_tensor_fusion": Bool(),
    "average_aggregated_gradients": Bool(), "average_training_metrics": Bool(),
    "gradient_compression": Bool(), "grad_updates_size_file": Str(),
    "mixed_precision": Enum(("O0", "O1", "O2", "O3")), "tensor_fusion_cycle_time": Int(minimum=0),
    "tensor_fusion_threshold": Int(minimum=0)})
_PACHYDERM = Obj({
    "pachd": Obj({"host": Str(), "port": Int()}, required=("host", "port")),
    "proxy": Obj({"scheme": Str(), "host": Str(), "port": Int()},
                 required=("scheme", "host", "port")),
    "dataset": Obj({k: Str() for k in ("project", "repo", "commit", "branch", "token")},
                   required=("project", "repo", "commit", "branch", "token"))},
    required=("pachd", "proxy", "dataset"))
INTEGRATIONS = Obj({"pachyderm": _PACHYDERM, "webhooks": Obj({
    "webhook_id": Arr(Int()), "webhook_name": _STRINGS, "exclude": Bool()})})


def _grid_in_use(obj: Mapping[str, Any]) -> list[tuple[str, str]]:
    """experiment.json's ``allOf``: when the grid searcher is in use, expect counts."""
    searcher = obj.get("searcher")
    if isinstance(searcher, dict) and searcher.get("name") == "grid":
        return grid_counts(obj.get("hyperparameters") or {}, "hyperparameters")
    return []


def _dethpc_slurm_keys() -> Iterable[str]:
    return ("time", "components", "workers", "bad_nodes", "watchdog", "stragglers")


EXPERIMENT = Obj({
    "bind_mounts": Arr(BIND_MOUNT),
    "checkpoint_policy": Enum(("best", "all", "none")),
    "checkpoint_storage": CHECKPOINT_STORAGE,
    "data": Obj({}, extra=AnyV()), "data_layer": Obj({}, extra=AnyV()),
    "integrations": INTEGRATIONS,
    "debug": Bool(), "description": Str(),
    "entrypoint": Union([(is_type(str), Str()), (is_type(list), _STRINGS)],
                        "expected a string or a list of strings"),
    "environment": ENVIRONMENT,
    "hyperparameters": HYPERPARAMETERS,
    "internal": Null("allow forking pre-0.15.6 non-Native-API experiments only: must be null"),
    "labels": _STRINGS,
    "log_policies": Arr(LOG_POLICY),
    "retention_policy": Obj({"log_retention_days": Int(minimum=-1, maximum=32767)}),
    "max_restarts": Int(minimum=0),
    "min_checkpoint_period": LENGTH, "min_validation_period": LENGTH,
    "name": Str(),
    "optimizations": OPTIMIZATIONS,
    "pbs": Obj({"slots_per_node": Int(minimum=1), "pbsbatch_args": _STRINGS}),
    "perform_initial_validation": Bool(),
    "preemption_timeout": Int(),
    "profiling": PROFILING,
    "project": Str(),
    "records_per_epoch": Int(),
    "reproducibility": Obj({"experiment_seed": Int(minimum=0)}),
    "resources": RESOURCES,
    "scheduling_unit": Int(minimum=1),
    "searcher": SEARCHER,
    "security": Obj({"kerberos": Obj({"config_file": Str()}, required=("config_file",))}),
    "slurm": Obj({"slots_per_node": Int(minimum=1), "gpu_type": Str(),
                  "sbatch_args": _STRINGS}, ext=_dethpc_slurm_keys),
    "tensorboard_storage": TENSORBOARD_STORAGE,
    "workspace": Str(),
}, eventually=("searcher",), checks=(lambda obj, path: _grid_in_use(obj),))

#: every schema a test case may name, by file name (``experiment`` for experiment.json)
SCHEMAS: dict[str, Rule] = {
    "experiment": EXPERIMENT, "length": LENGTH, "check-positive-length": POSITIVE_LENGTH,
    "searcher-length": SEARCHER_LENGTH, "searcher": SEARCHER,
    **{f"searcher-{k.replace('_', '-')}": v for k, v in SEARCHERS.items()},
    "hyperparameters": HYPERPARAMETERS, "hyperparameter": HYPERPARAMETER,
    "hyperparameter-int": HP_INT, "hyperparameter-double": HP_DOUBLE, "hyperparameter-log": HP_LOG,
    "hyperparameter-const": HP_CONST, "hyperparameter-categorical": HP_CATEGORICAL,
    "checkpoint-storage": CHECKPOINT_STORAGE, "shared-fs": SHARED_FS, "directory": DIRECTORY,
    "s3": S3, "gcs": GCS, "azure": STORAGES["azure"], "tensorboard-storage": TENSORBOARD_STORAGE,
    "resources": RESOURCES, "environment": ENVIRONMENT, "environment-image": IMAGE,
    "environment-variables": ENV_VARS, "bind-mount": BIND_MOUNT, "bind-mounts": Arr(BIND_MOUNT),
    "log-policy": LOG_POLICY, "log-policies": Arr(LOG_POLICY), "log-action": _LOG_ACTION,
    "log-legacy-action-cancel-retries": Obj({"type": Enum(("cancel_retries",))},
                                            required=("type",)),
    "log-legacy-action-exclude-node": Obj({"type": Enum(("exclude_node",))}, required=("type",)),
    "profiling": PROFILING, "optimizations": OPTIMIZATIONS, "integrations": INTEGRATIONS,
    "security": EXPERIMENT.props["security"], "devices": Arr(DEVICE),
}


class _GridHP(Rule):
    """check-grid-hyperparameter.json as a rule (for its test cases)."""

    def check(self, value: Any, path: str, cx: Ctx) -> None:
        for where, message in grid_counts(value, path):
            cx.error(where, message)


SCHEMAS["check-grid-hyperparameter"] = _GridHP()


# ------------------------------------------------------------------------ verdict
@dataclass(frozen=True)
class Verdict:
    """Determined's answer: errors (a config Determined refuses), warnings (what its
    master logs) and which paths are Determined fields (``is_determined``)."""

    errors: tuple[FieldError, ...]
    warnings: tuple[str, ...]
    known: frozenset[str]
    free: frozenset[str]

    def is_determined(self, path: str) -> bool:
        """True when ``path`` is a field of Determined's schema (or inside a free-form
        one such as ``data`` or a hyperparameter's value)."""
        if path in self.known or path in self.free:
            return True
        return any(path.startswith(f + ".") or path.startswith(f + "[") for f in self.free)


def check_schema(name: str, value: Any, complete: bool = False) -> list[FieldError]:
    """Errors of ``value`` against one schema of ``SCHEMAS`` (sanity, or completeness)."""
    cx = Ctx(complete=complete)
    SCHEMAS[name].check(value, "", cx)
    return [FieldError(p, m) for p, m in cx.errors]


def verdict(raw: Any) -> Verdict:
    """Determined 0.38.1's verdict on creating an experiment from ``raw``."""
    cx = Ctx(complete=True)
    warnings: list[str] = []
    EXPERIMENT.check(raw, "", cx)
    if isinstance(raw, dict):
        searcher = raw.get("searcher")
        if isinstance(searcher, dict):
            _assert_current(searcher, cx, warnings)
        if raw.get("entrypoint") is None:
            cx.error("entrypoint", "required: managed experiments require entrypoint, e.g. "
                                   "'python3 train.py' or 'model_def:TrialClass'")
    return Verdict(tuple(FieldError(p, m) for p, m in _unique(cx.errors)), tuple(warnings),
                   frozenset(cx.known), frozenset(cx.free))


def _assert_current(searcher: Mapping[str, Any], cx: Ctx, warnings: list[str]) -> None:
    """``SearcherConfig.AssertCurrent`` of searcher_config.go (see the module docstring
    for the one deliberate difference: legacy ``max_length`` still works for ASHA)."""
    name = searcher.get("name")
    if not isinstance(name, str):
        return   # the schema rules have said what a name must be
    if name in EOL_SEARCHERS:
        cx.error("searcher.name", f"the {name!r} searcher has been removed and is not valid "
                                  "for new experiments; use 'adaptive_asha', 'random', "
                                  "'grid' or 'single'")
        return
    if name not in SEARCHERS:
        return
    if name in ("adaptive_asha", "async_halving"):
        # single/grid/random: Determined's master logs the same deprecation for
        # max_length, but there it is dethpc's way to give the length: no warning
        if searcher.get("max_length") is not None:
            warnings.append(f"searcher.max_length: {DEPRECATED_MAX_LENGTH}")
        if searcher.get("stop_once") is not None:
            warnings.append(f"searcher.stop_once: {DEPRECATED_STOP_ONCE}")
        has = [k for k in ("max_time", "time_metric") if searcher.get(k) is not None]
        if len(has) == 1:
            other = "time_metric" if has[0] == "max_time" else "max_time"
            cx.error(f"searcher.{other}", f"required with searcher.{has[0]}: the `{name}` "
                                          "searcher requires `max_time` and `time_metric` to "
                                          "be set")
        elif not has and searcher.get("max_length") is None:
            cx.error("searcher", f"the `{name}` searcher requires `max_time` and `time_metric` "
                                 "to be set (e.g. time_metric: batches, max_time: 1000; dethpc "
                                 "also takes the legacy max_length)")


def _unique(errors: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return list(dict.fromkeys(errors))
