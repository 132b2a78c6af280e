"""Issue 15 item 6: bad input, fuzzed (hypothesis). What ``dethpc config validate``,
``submit`` and ``render`` read (a YAML file, ``--config key=value`` overrides, the
file's name) is generated at random, and around a valid config (one field replaced by
a random value, so the deep rules are reached too):

- only ``DethpcError`` ever comes out (the CLI prints it without a traceback), and a
  ``ConfigError`` names field paths;
- every config that validates renders a job script that ``bash -n`` accepts, and
  running it passes random argument and variable strings through unchanged with no
  shell expansion (a ``$(touch ...)`` canary never fires).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dethpc.common.errors import ConfigError, DethpcError
from dethpc.common.paths import ExperimentPaths
from dethpc.config import load_experiment_config, parse_experiment_config
from dethpc.config.experiment import check_supported
from dethpc.config.model import ClusterConfig, ResourcePool
from dethpc.jobs.jobscript import trial_script

VALID: dict[str, Any] = {
    "name": "fuzz", "entrypoint": "python3 train.py",
    "hyperparameters": {"lr": {"type": "log", "base": 10, "minval": -4, "maxval": -1},
                        "layers": {"type": "int", "minval": 1, "maxval": 4},
                        "opt": {"type": "categorical", "vals": ["sgd", "adam"]}},
    "searcher": {"name": "adaptive_asha", "metric": "loss", "max_trials": 8,
                 "max_length": {"batches": 100}, "max_concurrent_trials": 2},
    "resources": {"slots_per_trial": 1},
    "min_validation_period": {"batches": 10},
    "environment": {"environment_variables": ["A=1"]},
    "max_restarts": 2,
}
CLUSTER = ClusterConfig(pools={"default": ResourcePool(name="default")})

scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6),
                    st.floats(allow_nan=True, allow_infinity=True),
                    st.text(max_size=30))
keys = st.one_of(st.sampled_from(sorted(VALID) + ["type", "name", "vals", "minval",
                                                  "maxval", "batches", "epochs"]),
                 st.text(max_size=12))
trees = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=5)), max_leaves=20)
FAST = settings(max_examples=150, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def validate(raw: Any) -> None:
    """What validation may do with any input: succeed, or raise a DethpcError whose
    ConfigError form names field paths."""
    try:
        parse_experiment_config(raw)
    except ConfigError as exc:
        assert exc.errors and all(isinstance(e.path, str) for e in exc.errors)
        assert str(exc)
    except DethpcError:
        pass


@FAST
@given(trees)
def test_random_trees_never_escape_as_a_traceback(raw: Any) -> None:
    validate(raw)


def paths_of(tree: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(tree, dict):
        for k, v in tree.items():
            out += paths_of(v, (*prefix, k))
    elif isinstance(tree, list):
        for i, v in enumerate(tree):
            out += paths_of(v, (*prefix, i))
    return out


VALID_PATHS = [p for p in paths_of(VALID) if p]


@FAST
@given(st.sampled_from(VALID_PATHS), trees)
def test_one_field_replaced_by_anything(path: tuple[Any, ...], value: Any) -> None:
    raw = json.loads(json.dumps(VALID))
    node = raw
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    validate(raw)


@FAST
@given(st.lists(st.text(max_size=40), max_size=4))
def test_random_overrides(tmp_path_factory: pytest.TempPathFactory, overrides: list[str]) -> None:
    path = tmp_path_factory.mktemp("ov") / "exp.yaml"
    path.write_text(yaml.safe_dump(VALID))
    try:
        load_experiment_config(path, overrides)
    except DethpcError as exc:
        assert str(exc)


names = st.text(alphabet=st.characters(codec="utf-8", blacklist_characters="/\0"),
                min_size=1, max_size=40).filter(lambda n: n not in (".", ".."))


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(names, st.one_of(trees, st.text(max_size=200)))
def test_random_file_names_and_contents(tmp_path_factory: pytest.TempPathFactory, name: str,
                                        content: Any) -> None:
    directory = tmp_path_factory.mktemp("names")
    path = directory / name
    try:
        path.write_text(content if isinstance(content, str) else yaml.safe_dump(content),
                        encoding="utf-8", errors="surrogateescape")
    except (OSError, UnicodeEncodeError):
        return   # a name this file system refuses: nothing for dethpc to read
    for target in (path, directory / (name + ".missing")):
        try:
            load_experiment_config(target, [])
        except DethpcError as exc:
            assert str(exc)


words = st.text(alphabet=st.characters(codec="utf-8", blacklist_characters="\0"),
                max_size=25)


def test_rendered_script_passes_strings_through_unexpanded(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """Fuzzed argv and environment reach the trial unexpanded through the rendered
    script run by bash; at least 10 of the examples must really run a script, not only
    be skipped as invalid configs (counted here, in the one test: a second test reading
    a module-level list ran on another xdist worker once lanes joined the unit tier)."""
    ran: list[int] = []

    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(words, min_size=1, max_size=4), words,
           st.dictionaries(st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True),
                           words, max_size=3))
    def one(args: list[str], name: str, env: dict[str, str]) -> None:
        run_one(tmp_path_factory, args, name, env, ran)

    one()
    assert len(ran) >= 10, ran


def run_one(tmp_path_factory: pytest.TempPathFactory, args: list[str], name: str,
            env: dict[str, str], ran: list[int]) -> None:
    root = tmp_path_factory.mktemp("render")
    canary = root / "pwned"
    out = root / "argv.json"
    args = [*args, f"$(touch {canary})", f"`touch {canary}`"]
    dump = ("import json, os, sys; json.dump({'argv': sys.argv[1:], 'env': "
            f"{{k: os.environ.get(k) for k in {sorted(env)!r}}}}}, open({str(out)!r}, 'w'))")
    raw = {**VALID, "name": name or "x", "entrypoint": [sys.executable, "-c", dump, *args],
           "environment": {"environment_variables": [f"{k}={v}" for k, v in env.items()]},
           "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 1}}}
    try:
        cfg = parse_experiment_config(raw)
        check_supported(cfg)      # what submit refuses (a name bash owns: `_`, UID, ...)
    except DethpcError:
        return
    paths = ExperimentPaths(root / "run").ensure()
    paths.context.mkdir()
    paths.trial(1).root.mkdir(parents=True)
    try:
        text = trial_script(cfg, CLUSTER, backend="local", python=sys.executable,
                            run_dir=paths.root, exp_id=1, trial_id=1)
    except DethpcError:
        return
    script = paths.trial(1).root / "job.sbatch"
    script.write_text(text)
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    proc = subprocess.run(["bash", str(script)], capture_output=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[3])})
    assert proc.returncode == 0, proc
    got = json.loads(out.read_text())
    assert got["argv"] == args
    assert got["env"] == env
    assert not canary.exists()
    ran.append(1)
