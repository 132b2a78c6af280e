"""Determined 0.38.1's own verdicts (tests/unit/data/determined/README.md names the source).

Every schema test case Determined ships: an accepted case passes dethpc's rules for
that schema, a rejected case fails with a field path; Determined's example experiment
configs validate; and the issue's cases (0.38 length semantics, async_halving,
checkpoint storage, shm_size, pod_spec, int hparams) hold end to end through
``parse_experiment_config``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from dethpc.common.errors import ConfigError
from dethpc.config import parse_experiment_config
from dethpc.config.expconf import SCHEMAS, check_schema
from dethpc.config.experiment import check_supported

DATA = Path(__file__).parents[1] / "data" / "determined"
_MODES = (("sane_as", False, True), ("complete_as", True, True),
          ("sanity_errors", False, False), ("completeness_errors", True, False))
#: schemas of Determined's test machinery itself (test-root.json, test-union*.json)
_MACHINERY = ("test-root", "test-union", "test-union-a", "test-union-b", "test-sub")


def _cases() -> list[Any]:
    out = []
    for path in sorted((DATA / "test_cases").glob("*.yaml")):
        for case in yaml.safe_load(path.read_text()):
            for key, complete, accept in _MODES:
                for url in case.get(key) or ():
                    schema = url.rsplit("/", 1)[1].removesuffix(".json")
                    expected = (case.get(key) or {}).get(url, []) if not accept else []
                    out.append(pytest.param(schema, case["case"], complete, accept, expected,
                                            id=f"{path.stem}:{case['name']}:{schema}:{key}"))
    return out


CASES = _cases()


def test_the_table_is_big_and_covers_every_schema_it_names() -> None:
    named = {c.values[0] for c in CASES} - set(_MACHINERY)
    assert len(CASES) >= 170
    assert named <= set(SCHEMAS), named - set(SCHEMAS)


#: the cases of Determined's schema-machinery test schemas are not experiment fields:
#: left out of the table rather than skipped
FIELD_CASES = [c for c in CASES if c.values[0] not in _MACHINERY]


@pytest.mark.parametrize(("schema", "case", "complete", "accept", "expected"), FIELD_CASES)
def test_determined_schema_case(schema: str, case: Any, complete: bool, accept: bool,
                                expected: list[str]) -> None:
    found = check_schema(schema, case, complete=complete)
    if accept:
        assert found == [], [str(e) for e in found]
        return
    assert found, "Determined rejects this case; dethpc accepted it"
    # where Determined's expected error names a field (<config>.a.b: ...), so does ours
    for text in expected:
        match = re.match(r"<config>\.([\w.\[\]\\]+):", text)
        if match:
            path = match.group(1).replace("\\", "")
            assert any(e.path == path or e.path.startswith(path) for e in found), \
                (path, [str(e) for e in found])


EXAMPLES = sorted((DATA / "examples").glob("*/*.yaml"))


def test_examples_are_there() -> None:
    assert len(EXAMPLES) >= 35


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_determined_example_config_validates(path: Path) -> None:
    cfg = parse_experiment_config(yaml.safe_load(path.read_text()), str(path))
    assert cfg.entrypoint


# ------------------------------------------------------------- the cases
def config(**changes: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {"name": "x", "entrypoint": "python3 train.py",
                           "searcher": {"name": "single", "metric": "loss"}}
    raw.update(changes)
    return raw


def refused(raw: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_experiment_config(raw)
    assert info.value.exit_code == 2
    return [str(e) for e in info.value.errors]


@pytest.mark.parametrize("searcher", [
    {"name": "single", "metric": "loss"},
    {"name": "grid", "metric": "loss"},
    {"name": "random", "metric": "loss", "max_trials": 3},
    {"name": "single", "metric": "loss", "smaller_is_better": True, "source_trial_id": None},
])
def test_searchers_without_max_length_validate(searcher: dict[str, Any]) -> None:
    cfg = parse_experiment_config(config(searcher=searcher))
    assert cfg.searcher.max_length is None and not cfg.unsupported


@pytest.mark.parametrize("name", ["adaptive_asha", "async_halving"])
def test_asha_needs_time_metric_and_max_time_with_determineds_message(name: str) -> None:
    searcher = {"name": name, "metric": "loss", "max_trials": 4, "num_rungs": 2}
    if name == "adaptive_asha":
        del searcher["num_rungs"]
    found = refused(config(searcher=searcher))
    assert any(f"the `{name}` searcher requires `max_time` and `time_metric` to be set" in e
               for e in found), found
    ok = parse_experiment_config(config(searcher={**searcher, "time_metric": "batches",
                                                  "max_time": 64}))
    assert ok.searcher.max_length is not None and ok.searcher.max_length.value == 64
    legacy = parse_experiment_config(config(searcher={**searcher,
                                                      "max_length": {"batches": 64}}))
    assert legacy.searcher.max_length is not None
    assert any("max_length` field of the searcher config has been deprecated" in w
               for w in legacy.warnings)


def test_async_halving_runs_as_one_bracket_of_asha() -> None:
    cfg = parse_experiment_config(config(searcher={
        "name": "async_halving", "metric": "loss", "num_rungs": 3, "max_trials": 9,
        "time_metric": "batches", "max_time": 90, "divisor": 3}))
    assert cfg.searcher.name == "adaptive_asha"
    assert cfg.searcher.bracket_rungs == (3,) and cfg.searcher.divisor == 3
    assert any("runs as dethpc's adaptive_asha" in w for w in cfg.warnings)
    assert refused(config(searcher={"name": "async_halving", "metric": "loss",
                                    "max_trials": 9, "time_metric": "batches",
                                    "max_time": 9})) == ["searcher.num_rungs: required"]


@pytest.mark.parametrize("name", ["custom", "adaptive", "adaptive_simple", "sync_halving"])
def test_eol_searchers_are_refused_with_determineds_reason(name: str) -> None:
    searcher = {"name": name, "metric": "loss", "max_trials": 2, "num_rungs": 2,
                "budget": {"batches": 10}, "max_length": {"batches": 10}}
    allowed = {"custom": ("name", "metric"), "adaptive": ("name", "metric", "budget",
                                                          "max_length"),
               "adaptive_simple": ("name", "metric", "max_trials", "max_length"),
               "sync_halving": ("name", "metric", "num_rungs", "budget", "max_length")}
    found = refused(config(searcher={k: searcher[k] for k in allowed[name]}))
    assert any(e.startswith("searcher.name:") and "not valid for new experiments" in e
               for e in found), found


@pytest.mark.parametrize(("storage", "ok"), [
    ({"type": "shared_fs", "host_path": "/data", "storage_path": "ckpt"}, True),
    ({"type": "shared_fs", "host_path": "/data", "storage_path": "./a/b"}, True),
    ({"type": "shared_fs", "host_path": "/data", "storage_path": "/data/ckpt"}, True),
    ({"type": "shared_fs", "host_path": "/data", "container_path": "/c",
      "checkpoint_path": "/p", "propagation": "rprivate"}, True),
    ({"type": "directory", "container_path": "/ckpt"}, True),
    ({"save_trial_best": 2}, True),
    ({"type": "shared_fs", "host_path": "/data", "storage_path": "../x"}, False),
    ({"type": "shared_fs", "host_path": "/data", "storage_path": "a/../../x"}, False),
    ({"type": "shared_fs", "host_path": "/data", "storage_path": "/elsewhere"}, False),
    ({"type": "s3", "bucket": "b", "prefix": "a/../b"}, False),
    ({"type": "azure", "container": "c", "connection_string": "s", "credential": "k"}, False),
])
def test_checkpoint_storage(storage: dict[str, Any], ok: bool) -> None:
    raw = config(checkpoint_storage=storage)
    if ok:
        assert not parse_experiment_config(raw).unsupported
    else:
        assert refused(raw)[0].startswith("checkpoint_storage")


@pytest.mark.parametrize("storage", [
    {"type": "s3", "bucket": "b"}, {"type": "gcs", "bucket": "b"},
    {"type": "azure", "container": "c", "account_url": "https://x"},
])
def test_remote_storage_validates_with_a_warning_and_submit_refuses(
        storage: dict[str, Any]) -> None:
    cfg = parse_experiment_config(config(checkpoint_storage=storage))
    assert any(w.startswith("checkpoint_storage.type:") for w in cfg.warnings)
    with pytest.raises(ConfigError, match=r"checkpoint_storage\.type: not supported on dethpc"):
        check_supported(cfg)


@pytest.mark.parametrize(("resources", "ok"), [
    ({"slots": 2}, True), ({"shm_size": "1g"}, True), ({"shm_size": "1.5 GiB"}, True),
    ({"shm_size": 4096}, True), ({"shm_size": "1 gi"}, False), ({"shm_size": "giga"}, False),
    ({"priority": 100}, False), ({"slots_per_trial": -1}, False),
])
def test_resources(resources: dict[str, Any], ok: bool) -> None:
    raw = config(resources=resources)
    if ok:
        cfg = parse_experiment_config(raw)
        assert any(w.startswith(f"resources.{next(iter(resources))}:") for w in cfg.warnings)
    else:
        assert refused(raw)[0].startswith(f"resources.{next(iter(resources))}")


@pytest.mark.parametrize(("key", "message"), [
    ("image", "container Image is not configurable"),
    ("command", "container Command is not configurable"),
    ("args", "container Args are not configurable"),
])
def test_pod_spec_may_not_configure_determineds_container(key: str, message: str) -> None:
    spec = {"spec": {"containers": [{"name": "determined-container", key: "x"}]}}
    found = refused(config(environment={"pod_spec": spec}))
    assert len(found) == 1
    assert found[0].startswith(f"environment.pod_spec.spec.containers[0].{key}: {message}")
    mine = {"spec": {"containers": [{"name": "sidecar", key: "x"}]}}
    cfg = parse_experiment_config(config(environment={"pod_spec": mine}))
    assert any(w.startswith("environment.pod_spec: ignored") for w in cfg.warnings)


@pytest.mark.parametrize(("hp", "path"), [
    ({"type": "int", "minval": 3, "maxval": 3}, "hyperparameters.h"),
    ({"type": "double", "minval": 0.5, "maxval": 0.5}, "hyperparameters.h"),
    ({"type": "log", "minval": -3, "maxval": -1}, "hyperparameters.h.base"),
    ({"type": "int", "minval": 1.5, "maxval": 3}, "hyperparameters.h.minval"),
])
def test_hyperparameters_determined_rejects(hp: dict[str, Any], path: str) -> None:
    found = refused(config(hyperparameters={"h": hp}))
    assert any(e.startswith(path + ":") for e in found), found


# ------------------------------------------------------- runtime without a length
def test_pool_searchers_without_max_length_create_trials_of_length_zero() -> None:
    """Length 0 = no target.json: the trial runs until its training code ends."""
    from dethpc.searchers.base import Create, Shutdown
    from dethpc.searchers.factory import make_searcher

    cfg = parse_experiment_config(config(searcher={"name": "random", "metric": "loss",
                                                   "max_trials": 2}))
    searcher = make_searcher(cfg.searcher, cfg.hyperparameters, 0)
    creates = [a for a in searcher.initial() if isinstance(a, Create)]
    assert [(c.length, c.validate_at) for c in creates] == [(0, ()), (0, ())]
    searcher.on_validation(creates[0].request_id, 0.5, 10)
    actions = [*searcher.on_exited(creates[0].request_id, "completed"),
               *searcher.on_exited(creates[1].request_id, "completed")]
    assert any(isinstance(a, Shutdown) for a in actions)


@pytest.mark.parametrize(("changes", "warning"), [
    ({"resources": {"max_slots": 4}}, "resources.max_slots: ignored"),
    ({"resources": {"priority": 50}}, "resources.priority: ignored"),
    ({"records_per_epoch": 60000}, "records_per_epoch: ignored"),
    ({"resources": {"slots": 2}}, "resources.slots: ignored"),
    ({"checkpoint_policy": "all"}, "checkpoint_policy: ignored"),
    ({"checkpoint_storage": {"type": "shared_fs", "host_path": "/d", "container_path": "/c"}},
     "checkpoint_storage.container_path: ignored"),
])
def test_fields_without_effect_here_warn(changes: dict[str, Any], warning: str) -> None:
    cfg = parse_experiment_config(config(**changes))
    assert any(w.startswith(warning) for w in cfg.warnings), cfg.warnings
    assert not cfg.unsupported


@pytest.mark.parametrize(("searcher", "path"), [
    ({"name": "adaptive_asha", "metric": "m", "max_trials": 4, "time_metric": "batches",
      "max_time": 64, "divisor": 1.5}, "searcher.divisor"),
    ({"name": "random", "metric": "m", "max_trials": 4, "max_length": 0},
     "searcher.max_length"),
])
def test_determined_values_dethpcs_searchers_cannot_run(searcher: dict[str, Any],
                                                         path: str) -> None:
    cfg = parse_experiment_config(config(searcher=searcher))
    assert [e.path for e in cfg.unsupported] == [path]
    with pytest.raises(ConfigError, match=path.replace(".", r"\.")):
        check_supported(cfg)


def test_async_halving_plans_exactly_one_bracket() -> None:
    """Determined's async_halving is one ASHA bracket: num_rungs rungs, every trial."""
    from dethpc.searchers.asha import plan_brackets

    cfg = parse_experiment_config(config(searcher={
        "name": "async_halving", "metric": "loss", "num_rungs": 3, "max_trials": 9,
        "max_concurrent_trials": 3, "time_metric": "batches", "max_time": 90,
        "divisor": 3}))
    plan = plan_brackets(cfg.searcher)
    assert [(b.num_rungs, b.max_trials, b.max_concurrent, b.lengths) for b in plan] == [
        (3, 9, 3, (10, 30, 90))]


def test_storage_fields_without_a_type_are_refused_at_submit() -> None:
    cfg = parse_experiment_config(config(checkpoint_storage={"host_path": "/x"}))
    assert [e.path for e in cfg.unsupported] == ["checkpoint_storage.host_path"]
    assert refused(config(checkpoint_storage={"hots_path": "/x"}))[0].startswith(
        "checkpoint_storage.hots_path: unknown field")
