"""Determined 0.38.1's public surface, walked against dethpc.

The inventory (``tests/unit/data/determined/surface-0.38.1.json``) is derived from
Determined's source by ``scripts/determined_inventory.py``; the classification is
``dethpc.core.determined_rules``. For every inventory entry:

* it is classified, and no line of the table is stale;
* a served (or served differently) name exists where the table says, of a compatible
  kind and with a compatible signature: Determined's parameters users pass (not its
  ``_private`` ones) are there with the same names and kinds (positional ones at the same
  place), optional stays optional, dethpc's extra parameters are optional;
* a refused name, used (called, instantiated or read), raises ``UnsupportedError`` whose
  message names the Determined feature: never an ``AttributeError``;
* a launcher and its options map to a dethpc launcher that parses them, or are refused at
  submit with the launcher's name;
* every ``DET_*`` variable dethpc sets is classified served, every one classified served is
  set, and none classified absent is set; ``DET_EXPERIMENT_CONFIG`` reaches the training
  process byte-exact through the rendered job script run by bash;
* docs/core-api.md's generated section is what the generator prints.

The behaviour of what is served differently is tested in ``test_determined_served.py``.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import os
import re
import subprocess
import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from dethpc.common.errors import DethpcError, UnsupportedError
from dethpc.core import determined_rules as ds
from tests.surface_coverage import resolve

REPO = Path(__file__).resolve().parents[3]
INVENTORY_PATH = REPO / "tests" / "unit" / "data" / "determined" / "surface-0.38.1.json"
INVENTORY: dict[str, Any] = json.loads(INVENTORY_PATH.read_text())
NAMES: list[dict[str, Any]] = INVENTORY["names"]
ENV: list[dict[str, Any]] = INVENTORY["environment"]
HAS_TORCH = importlib.util.find_spec("torch") is not None


def _status(entry: dict[str, Any]) -> str:
    found = ds.rule_for(ds.entry_key(entry))
    return found[1].status if found else "?"


def _entries(*statuses: str, kinds: tuple[str, ...] | None = None,
             launch: bool | None = None) -> list[Any]:
    out = []
    for entry in NAMES:
        is_launch = entry["module"].startswith("determined.launch")
        if _status(entry) not in statuses or (kinds and entry["kind"] not in kinds):
            continue
        if launch is not None and is_launch != launch:
            continue
        out.append(pytest.param(entry, id=ds.entry_key(entry)))
    return out


# ----------------------------------------------------------------- the table
def test_every_name_and_variable_is_classified() -> None:
    missing = [ds.entry_key(e) for e in NAMES if ds.rule_for(ds.entry_key(e)) is None]
    missing += [v["name"] for v in ENV if ds.rule_for("$" + v["name"]) is None]
    assert not missing, f"add a line to dethpc/core/determined_rules.py for: {missing}"


def test_no_line_of_the_table_is_stale() -> None:
    used = {ds.rule_for(ds.entry_key(e))[0] for e in NAMES}  # type: ignore[index]
    stale = sorted(set(ds.RULES) - used)
    stale += sorted(set(ds.ENV_RULES) - {"$" + v["name"] for v in ENV})
    assert not stale, f"lines that classify nothing in the inventory: {stale}"


def test_classes_are_the_four_and_notes_are_given() -> None:
    for key, rule in {**ds.RULES, **ds.ENV_RULES}.items():
        allowed = (ds.SERVED, ds.DIFFERENT, ds.ABSENT) if key.startswith("$") else (
            ds.SERVED, ds.DIFFERENT, ds.REFUSED)
        assert rule.status in allowed, key
        if rule.status != ds.SERVED:
            assert rule.note, f"{key}: a {rule.status} line says what happens"
        if rule.status == ds.REFUSED:
            assert rule.feature, f"{key}: a refusal names the Determined feature"


def test_inventory_is_sorted_and_complete_per_entry() -> None:
    keys = [(e["module"], e["name"]) for e in NAMES]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)
    assert [v["name"] for v in ENV] == sorted(v["name"] for v in ENV)
    for entry in NAMES:
        assert {"module", "name", "kind", "source"} <= set(entry), entry
        assert entry["kind"] in ("module", "class", "function", "method", "classmethod",
                                 "staticmethod", "property", "attribute", "constant",
                                 "cli_option"), entry
    for var in ENV:
        assert var["found_in"] and all(re.match(r"^[\w./-]+:\d+$", w) for w in var["found_in"])


# ------------------------------------------------------------- resolving
# resolve(path): the object at a dotted path (tests/surface_coverage.py)
def _context() -> Any:
    import dethpc.core as core

    return core.init(env={}, exit_on_preempt=False)


def _torch_context() -> Any:
    from dethpc.pytorch._state import preserved_rng
    from dethpc.pytorch._trial import PyTorchTrialContext

    with preserved_rng():
        return PyTorchTrialContext(_context())


def _deepspeed_context() -> Any:
    from dethpc.pytorch._deepspeed import DeepSpeedTrialContext
    from dethpc.pytorch._state import preserved_rng

    with preserved_rng():
        return DeepSpeedTrialContext(_context())


def _load_context() -> Any:
    from dethpc.pytorch._load import CheckpointLoadContext
    from dethpc.pytorch._state import preserved_rng

    with preserved_rng():
        return CheckpointLoadContext({"x": 1})


def _instances() -> dict[str, Callable[[], Any]]:
    """Instances of the classes whose Determined attributes are set in ``__init__``."""
    import dethpc
    import dethpc.core as core

    made: dict[str, Callable[[], Any]] = {
        "dethpc.InvalidHP": lambda: dethpc.InvalidHP("x"),
        "dethpc.RendezvousInfo": lambda: dethpc.RendezvousInfo(["a"], 0, [1]),
        "dethpc.TrialInfo": lambda: dethpc.TrialInfo(1, 2, 3, {}, {}, 0, 1, False, None),
        "dethpc.core.Context": _context,
        "dethpc.core.DistributedContext": lambda: core.DistributedContext(),
        "dethpc.core.DummyDistributedContext": lambda: core.DummyDistributedContext(),
        "dethpc.core.DummySearcherOperation": lambda: core.DummySearcherOperation(3, True),
        "dethpc.core.SearcherOperation": lambda: core.SearcherOperation(3, "batches"),
        "dethpc.pytorch.Batch": lambda: dethpc.pytorch.Batch(1),
        "dethpc.pytorch.Epoch": lambda: dethpc.pytorch.Epoch(1),
        "dethpc.pytorch.TrainUnit": lambda: dethpc.pytorch.TrainUnit(1),
    }
    if HAS_TORCH:
        from torch.utils.data import BatchSampler, SequentialSampler

        def batches() -> Any:
            return BatchSampler(SequentialSampler(range(4)), 2, False)

        samplers = dethpc.pytorch.samplers
        made["dethpc.pytorch.DataLoader"] = lambda: dethpc.pytorch.DataLoader([1, 2, 3])
        made["dethpc.pytorch.PyTorchTrialContext"] = _torch_context
        made["dethpc.pytorch.CheckpointLoadContext"] = _load_context
        made["dethpc.pytorch.deepspeed.DeepSpeedTrialContext"] = _deepspeed_context
        made["dethpc.pytorch.samplers.DistributedBatchSampler"] = \
            lambda: samplers.DistributedBatchSampler(batches(), 2, 1)
        made["dethpc.pytorch.samplers.RepeatBatchSampler"] = \
            lambda: samplers.RepeatBatchSampler(batches())
        made["dethpc.pytorch.samplers.SkipBatchSampler"] = \
            lambda: samplers.SkipBatchSampler(batches(), 1)
    return made


def _needs_torch(path: str) -> bool:
    return path.startswith("dethpc.pytorch.") and path.split(".")[2] not in (
        "Batch", "Epoch", "TrainUnit") and path != \
        "dethpc.pytorch.deepspeed.overwrite_deepspeed_config"


# ------------------------------------------------------------ signatures
def signature_problems(theirs: list[dict[str, Any]], ours: inspect.Signature) -> list[str]:
    """What makes ``ours`` unable to take a call written for Determined's ``theirs``."""
    problems = []
    mine = list(ours.parameters.values())
    by_name = {p.name: p for p in mine}
    positional = [p.name for p in mine if p.kind in (p.POSITIONAL_ONLY,
                                                     p.POSITIONAL_OR_KEYWORD)]
    their_positional: list[str] = []
    private_seen = False
    for param in theirs:
        name, kind = param["name"], param["kind"]
        if name.startswith("_"):
            private_seen = True
            continue
        if kind in ("VAR_POSITIONAL", "VAR_KEYWORD"):
            if not any(p.kind.name == kind for p in mine):
                problems.append(f"no {'*' if kind == 'VAR_POSITIONAL' else '**'}{name}")
            continue
        got = by_name.get(name)
        if got is None:
            problems.append(f"no parameter {name!r}")
            continue
        ok_kinds = {"POSITIONAL_OR_KEYWORD": ("POSITIONAL_OR_KEYWORD",),
                    "POSITIONAL_ONLY": ("POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD"),
                    "KEYWORD_ONLY": ("KEYWORD_ONLY", "POSITIONAL_OR_KEYWORD")}[kind]
        if got.kind.name not in ok_kinds:
            problems.append(f"{name}: {got.kind.name}, Determined's is {kind}")
        if kind != "KEYWORD_ONLY":
            their_positional.append(name)
            index = len(their_positional) - 1
            if not private_seen and (index >= len(positional) or positional[index] != name):
                problems.append(f"{name}: not positional parameter #{index + 1}")
        if "default" in param and got.default is inspect.Parameter.empty:
            problems.append(f"{name}: optional in Determined ({param['default']}), required here")
    known = {p["name"] for p in theirs}
    for p in mine:
        if p.name not in known and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) \
                and p.default is inspect.Parameter.empty:
            problems.append(f"{p.name}: an extra parameter that is required")
    return problems


@pytest.mark.parametrize(("theirs", "ours", "problem"), [
    ([{"name": "a", "kind": "POSITIONAL_OR_KEYWORD"}], "a", None),
    ([{"name": "a", "kind": "POSITIONAL_OR_KEYWORD"}], "b", "no parameter 'a'"),
    ([{"name": "a", "kind": "POSITIONAL_OR_KEYWORD"}], "*, a", "a: KEYWORD_ONLY"),
    ([{"name": "a", "kind": "KEYWORD_ONLY"}], "a", None),
    ([{"name": "a", "kind": "POSITIONAL_OR_KEYWORD"},
      {"name": "b", "kind": "POSITIONAL_OR_KEYWORD"}], "b, a", "a: not positional parameter #1"),
    ([{"name": "a", "kind": "POSITIONAL_OR_KEYWORD", "default": "1"}], "a",
     "a: optional in Determined"),
    ([{"name": "a", "kind": "POSITIONAL_OR_KEYWORD"}], "a, extra", "extra: an extra"),
    ([{"name": "a", "kind": "POSITIONAL_OR_KEYWORD"}], "a, extra=1", None),
    ([{"name": "_session", "kind": "POSITIONAL_OR_KEYWORD", "default": "None"},
      {"name": "b", "kind": "POSITIONAL_OR_KEYWORD", "default": "None"}], "b=None", None),
    ([{"name": "args", "kind": "VAR_POSITIONAL"}], "x=1", "no *args"),
    ([{"name": "kw", "kind": "VAR_KEYWORD"}], "**other", None),
])
def test_signature_problems(theirs: list[dict[str, Any]], ours: str,
                            problem: str | None) -> None:
    namespace: dict[str, Any] = {}
    exec(f"def f({ours}): pass", namespace)  # noqa: S102 - a test's own literal
    found = signature_problems(theirs, inspect.signature(namespace["f"]))
    if problem is None:
        assert found == []
    else:
        assert any(problem in p for p in found), found


def _own_signature(owner: Any, attr: str, kind: str) -> inspect.Signature | None:
    raw = inspect.getattr_static(owner, attr)
    if isinstance(raw, classmethod | staticmethod):
        fn = raw.__func__
        sig = inspect.signature(fn)
        if isinstance(raw, classmethod):
            sig = sig.replace(parameters=list(sig.parameters.values())[1:])
        return sig
    if inspect.isfunction(raw):
        sig = inspect.signature(raw)
        return sig.replace(parameters=list(sig.parameters.values())[1:])
    if callable(raw):
        return inspect.signature(getattr(owner, attr))
    return None


def check_served(entry: dict[str, Any]) -> list[str]:
    """What is wrong with dethpc's counterpart of a served entry ([] when nothing)."""
    key = ds.entry_key(entry)
    found = ds.rule_for(key)
    assert found is not None
    rule = found[1]
    path = ds.dethpc_path(key)
    owner_path, _, attr = path.rpartition(".")
    kind = entry["kind"]
    is_member = "." in entry["name"]
    try:
        obj = resolve(path)
    except AttributeError:
        if not is_member or kind not in ("attribute", "property"):
            return [f"{path} does not exist"]
        owner = resolve(owner_path)
        make = _instances().get(owner_path)
        fields = getattr(owner, "__dataclass_fields__", {})
        if attr in fields:
            return []
        if make is None:
            return [f"{path}: no class attribute, and the test has no instance of "
                    f"{owner_path} to look for it (add one to _instances())"]
        return [] if hasattr(make(), attr) else [f"{path} does not exist on an instance"]
    if kind == "module":
        return [] if isinstance(obj, types.ModuleType) else [f"{path} is not a module"]
    if kind == "class":
        if not isinstance(obj, type):
            return [f"{path} is not a class"]
        if rule.signature and entry.get("signature") is not None:
            return [f"{path}(): {p}" for p in
                    signature_problems(entry["signature"], inspect.signature(obj))]
        return []
    if kind in ("function", "method", "classmethod", "staticmethod"):
        if not callable(obj):
            return [f"{path} is not callable"]
        if is_member:
            owner = resolve(owner_path)
            static = inspect.getattr_static(owner, attr)
            if kind in ("classmethod", "staticmethod") and not isinstance(
                    static, classmethod | staticmethod):
                return [f"{path} must be callable on the class ({kind})"]
            sig = _own_signature(owner, attr, kind)
        else:
            sig = inspect.signature(obj)
        if rule.signature and sig is not None and entry.get("signature") is not None:
            return [f"{path}(): {p}" for p in signature_problems(entry["signature"], sig)]
        return []
    if kind in ("property", "attribute") and is_member:
        owner = resolve(owner_path)
        if inspect.isfunction(inspect.getattr_static(owner, attr)):
            return [f"{path} is a method, Determined's is a {kind}"]
    return []


@pytest.mark.parametrize("entry", _entries(ds.SERVED, ds.DIFFERENT, launch=False))
def test_served_name_exists_with_a_compatible_signature(entry: dict[str, Any]) -> None:
    path = ds.dethpc_path(ds.entry_key(entry))
    if _needs_torch(path) and not HAS_TORCH:
        pytest.skip("needs torch")
    assert check_served(entry) == []


def test_a_drifted_signature_is_caught() -> None:
    """The walk fails when a name disappears or a signature drifts."""
    entry = next(e for e in NAMES
                 if ds.entry_key(e) == "determined.core.TrainContext.report_early_exit")
    assert check_served(entry) == []
    drifted = {**entry, "signature": [{"name": "why", "kind": "POSITIONAL_OR_KEYWORD"}]}
    assert any("no parameter 'why'" in p for p in check_served(drifted))
    gone = {**entry, "name": "TrainContext.report_early_exit_gone"}
    assert check_served(gone) == [
        "dethpc.core.TrainContext.report_early_exit_gone does not exist"]


# -------------------------------------------------------------- refusals
def use(entry: dict[str, Any]) -> None:
    """Use dethpc's counterpart of a refused entry as Determined's code would."""
    path = ds.dethpc_path(ds.entry_key(entry))
    obj = resolve(path)            # reading a refused attribute refuses here
    kind = entry["kind"]
    if isinstance(obj, types.ModuleType):
        obj.AnyName  # noqa: B018 - a refused module refuses every public name
    elif kind == "class" or isinstance(obj, type):
        obj()
    elif kind in ("function", "method", "classmethod", "staticmethod"):
        params = entry.get("signature") or []
        args = [None] * sum(1 for p in params if "default" not in p
                            and p["kind"] in ("POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD"))
        kwargs = {p["name"]: None for p in params
                  if p["kind"] == "KEYWORD_ONLY" and "default" not in p}
        if "." in entry["name"] and kind == "method":
            args = [None, *args]   # through the class: self is any object
        obj(*args, **kwargs)
    raise AssertionError(f"{path} did not refuse")


@pytest.mark.parametrize("entry", _entries(ds.REFUSED, launch=False))
def test_refused_name_says_so_where_used(entry: dict[str, Any]) -> None:
    key = ds.entry_key(entry)
    if _needs_torch(ds.dethpc_path(key)) and not HAS_TORCH:
        pytest.skip("needs torch")
    rule = ds.rule_for(key)[1]  # type: ignore[index]
    with pytest.raises(UnsupportedError) as caught:
        use(entry)
    assert not isinstance(caught.value, AttributeError)
    assert rule.feature in str(caught.value) and "Instead:" in str(caught.value)


def test_refused_stand_ins_behave_for_tools_and_subclasses() -> None:
    import dethpc

    stub = dethpc.EnvContext
    assert not hasattr(stub, "_private")        # private lookups stay AttributeErrors

    class Mine(dethpc.pytorch.deepspeed.DeepSpeedTrialController):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            pass

    with pytest.raises(UnsupportedError, match="DeepSpeedTrialController"):
        Mine()
    with pytest.raises(UnsupportedError, match=r"det\.EnvContext\.hparams"):
        stub.hparams  # noqa: B018


# -------------------------------------------------------------- launchers
LAUNCH_ARGS = {"--trial": ["--trial", "model_def:MyTrial"], "script": ["train.py", "--lr", "1"],
               "--autohorovod": ["--autohorovod", "train.py"], "--port": ["--port", "1", "t.py"],
               "rank": ["0", "--", "python3", "t.py"], "--no-redirect-stdio":
               ["--no-redirect-stdio", "0", "t.py"]}


def _launch_argv(entry: dict[str, Any]) -> list[str]:
    if entry["kind"] == "module":
        return ["python3", "-m", f"{entry['module']}.{entry['name']}", "train.py"]
    return ["python3", "-m", entry["module"], *LAUNCH_ARGS[entry["name"]]]


@pytest.mark.parametrize("entry", _entries(ds.SERVED, ds.DIFFERENT, launch=True))
def test_launcher_maps_to_dethpc_and_parses(entry: dict[str, Any]) -> None:
    from dethpc.launch._common import parse_launcher_args
    from dethpc.launch._determined import from_determined

    argv = from_determined(_launch_argv(entry))
    assert argv[1] == "-m" and argv[2].startswith("dethpc.launch.")
    module = importlib.import_module(argv[2])
    options = getattr(module, "OPTIONS", ())
    if argv[2] == "dethpc.launch.horovod":
        from dethpc.launch.mpi import OPTIONS as options  # horovod takes mpi's options
    parsed = parse_launcher_args(argv[3:], options)
    assert parsed.target is not None


@pytest.mark.parametrize("entry", _entries(ds.REFUSED, launch=True))
def test_refused_launcher_is_refused_at_submit(entry: dict[str, Any]) -> None:
    from dethpc.launch._determined import from_determined

    module = entry["module"] if entry["kind"] != "module" else \
        f"{entry['module']}.{entry['name']}"
    with pytest.raises(DethpcError, match=re.escape(module)):
        from_determined(_launch_argv(entry))


# ------------------------------------------------------------ environment
def _env_status(name: str) -> str:
    found = ds.rule_for("$" + name)
    return found[1].status if found else "?"


@pytest.fixture
def rendered(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """A local-backend trial script whose command dumps its environment as JSON, with
    a checkpoint to resume from and hyperparameters in the trial directory; (script,
    where the environment lands)."""
    from dethpc.config import parse_experiment_config
    from dethpc.config.cluster import parse_cluster_config
    from dethpc.jobs.jobscript import trial_script

    run = tmp_path / "runs" / "5"
    trial = run / "trials" / "2"
    ckpt = trial / "checkpoints" / "c0ffee"
    ckpt.mkdir(parents=True)
    (ckpt / "metadata.json").write_text(json.dumps({"steps_completed": 40, "time": 1.0,
                                                    "files": {}, "metadata": {}}))
    (trial / "hparams.json").write_text(json.dumps({"lr": 0.1, "name": "it's \"x\""}))
    (run / "context").mkdir()
    out = tmp_path / "env.json"
    dump = (f"import json, os; json.dump(dict(os.environ), open({str(out)!r}, 'w'))")
    cfg = parse_experiment_config({
        "name": "quotes", "entrypoint": [sys.executable, "-c", dump],
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 1}},
        "data": {"both": "say \"hi\" and 'bye'", "back": "a\\b\\\"c", "dollar": "$HOME `x`",
                 "nl": "line1\nline2", "uni": "\u00e9\u4e2d", "nested": [{"q": "'\""}]},
        "resources": {"slots_per_trial": 1}})
    cluster = parse_cluster_config({"backend": "local", "runs_root": str(tmp_path / "runs"),
                                    "pools": {"default": {"slots_per_node": 1}}}, "test")
    script = tmp_path / "job.sbatch"
    script.write_text(trial_script(cfg, cluster, backend="local", python=sys.executable,
                                   run_dir=run, exp_id=5, trial_id=2))
    yield script, out


def _run(script: Path, extra: dict[str, str]) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/tmp",
           "USER": "someone", "SLURM_JOB_ID": "77", "SLURM_RESTART_COUNT": "1",
           "SLURMD_NODENAME": "node7", "SLURM_NODEID": "0", "SLURM_CLUSTER_NAME": "dev",
           "PYTHONPATH": str(REPO), **extra}
    return subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True,
                          timeout=120, check=False)


def test_det_variables_reach_the_training_process(rendered: tuple[Path, Path]) -> None:
    script, out = rendered
    done = _run(script, {})
    assert done.returncode == 0, done.stdout + done.stderr
    env = json.loads(out.read_text())
    det = {k: v for k, v in env.items() if k.startswith("DET_")}
    config = json.loads(det["DET_EXPERIMENT_CONFIG"])
    assert config["data"] == {"both": "say \"hi\" and 'bye'", "back": "a\\b\\\"c",
                              "dollar": "$HOME `x`", "nl": "line1\nline2",
                              "uni": "\u00e9\u4e2d", "nested": [{"q": "'\""}]}
    assert json.loads(det["DET_HPARAMS"]) == {"lr": 0.1, "name": "it's \"x\""}
    assert {k: det[k] for k in ("DET_EXPERIMENT_ID", "DET_TRIAL_ID", "DET_TASK_ID",
                                "DET_TASK_TYPE", "DET_TRIAL_RUN_ID", "DET_ALLOCATION_ID",
                                "DET_LATEST_CHECKPOINT", "DET_STEPS_COMPLETED",
                                "DET_AGENT_ID", "DET_CONTAINER_ID", "DET_SLOT_IDS",
                                "DET_CLUSTER_ID", "DET_RESOURCES_ID", "DET_RESOURCES_TYPE",
                                "DET_USER", "DET_SLOT_TYPE")} == {
        "DET_EXPERIMENT_ID": "5", "DET_TRIAL_ID": "2", "DET_TASK_ID": "5.2",
        "DET_TASK_TYPE": "TRIAL", "DET_TRIAL_RUN_ID": "2", "DET_ALLOCATION_ID": "5.2.2",
        "DET_LATEST_CHECKPOINT": "c0ffee", "DET_STEPS_COMPLETED": "40",
        "DET_AGENT_ID": "node7", "DET_CONTAINER_ID": "[cont=0]", "DET_SLOT_IDS": "[0]",
        "DET_CLUSTER_ID": "dev", "DET_RESOURCES_ID": "77", "DET_RESOURCES_TYPE": "slurm-job",
        "DET_USER": "someone", "DET_SLOT_TYPE": "cpu"}
    set_by_us = set(det)
    served = {v["name"] for v in ENV if _env_status(v["name"]) in (ds.SERVED, ds.DIFFERENT)}
    absent = {v["name"] for v in ENV if _env_status(v["name"]) == ds.ABSENT}
    # what the job script sets: everything served but the launchers' own and the optional
    from dethpc.launch import detenv

    expected = served - set(detenv.LAUNCHER) - {"DET_INTER_NODE_NETWORK_INTERFACE"}
    assert set_by_us == expected, (sorted(set_by_us - expected), sorted(expected - set_by_us))
    assert not set_by_us & absent


def test_every_det_variable_dethpc_sets_is_classified_served() -> None:
    from dethpc.launch import detenv
    from dethpc.launch._common import JobLayout, rendezvous_env

    ours = {*detenv.STATIC, *detenv.RUN, *detenv.LAUNCHER}
    served = {v["name"] for v in ENV if _env_status(v["name"]) in (ds.SERVED, ds.DIFFERENT)}
    assert ours == served
    layout = JobLayout(hosts=("n1",), tasks_per_node=1, master_addr="n1", master_port=1)
    assert rendezvous_env(layout)["DET_CHIEF_IP"] == "n1"


def test_an_oversized_config_is_left_out_not_fatal() -> None:
    from dethpc.launch import detenv

    env = dict(detenv.static_env(experiment_id=1, trial_id=1, trial_seed=1,
                                 config={"data": {"x": "y" * 200_000}}, gpus=False,
                                 workdir="/w"))
    assert "DET_EXPERIMENT_CONFIG" not in env and env["DET_TASK_TYPE"] == "TRIAL"


# ---------------------------------------------------------------- the doc
def test_core_api_doc_shows_the_generated_table() -> None:
    text = (REPO / "docs" / "core-api.md").read_text()
    assert ds.DOC_BEGIN in text and ds.DOC_END in text
    section = text[text.index(ds.DOC_BEGIN):text.index(ds.DOC_END) + len(ds.DOC_END)] + "\n"
    assert section == ds.doc_table(INVENTORY), (
        "docs/core-api.md is stale: python scripts/determined_inventory.py --doc")
    assert "unclassified" not in section


# ------------------------------------------------------------- the script
def _script() -> Any:
    spec = importlib.util.spec_from_file_location("determined_inventory_script",
                                                  REPO / "scripts" / "determined_inventory.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_script_reads_a_source_tree_by_its_rules(tmp_path: Path) -> None:
    """scripts/determined_inventory.py on a tiny tree shaped like Determined's."""
    h = "harness/determined"
    _write(tmp_path, {
        f"{h}/__init__.py": "from determined._a import Thing, make\nfrom determined import core"
                            "\nfrom determined import util\nimport os\n_hidden = 1\n"
                            "LOG_FORMAT = 'x'\n",
        f"{h}/_a.py": "import enum\nclass Base:\n    def inherited(self, a, *, b=2): ...\n"
                      "class Thing(Base):\n    class Mode(enum.Enum):\n        A = 1\n"
                      "    def __init__(self, x, y=None):\n        self.x = x\n"
                      "        self._p = 1\n    @property\n    def prop(self): ...\n"
                      "    @classmethod\n    def build(cls, z): ...\n"
                      "    def _private(self): ...\n"
                      "def make(path, *args, **kw): ...\n",
        f"{h}/core/__init__.py": "from determined.core._c import init\n",
        f"{h}/core/_c.py": "import os\ndef init(*, distributed=None):\n"
                           "    return os.environ.get('DET_FROM_HARNESS')\n",
        f"{h}/pytorch/__init__.py": "", f"{h}/pytorch/deepspeed/__init__.py": "",
        f"{h}/pytorch/samplers.py": "class S:\n    def __iter__(self): ...\n",
        f"{h}/launch/__init__.py": "",
        **{f"{h}/launch/{n}.py": "import argparse\np = argparse.ArgumentParser()\n"
                                 "p.add_argument('--trial')\n" for n in
           ("torch_distributed", "deepspeed", "horovod", "tensorflow", "wrap_rank")},
        f"{h}/util.py": "def merge_dicts(a, b): ...\ndef unused(): ...\n",
        f"{h}/errors.py": "class Oops(Exception): ...\n",
        f"{h}/common/__init__.py": "", f"{h}/common/util.py": "def yaml_safe_load(f): ...\n",
        f"{h}/cli/cli.py": "X = 'DET_ONLY_CLI'\n",
        "master/pkg/tasks/t.go": 'm["DET_FROM_GO"] = "1"\n',
        "master/static/srv/e.sh": "export DET_FROM_SH=1\n# DET_IN_COMMENT\n",
        "examples/x/train.py": "from determined import util as du\ndu.merge_dicts({}, {})\n"
                               "from determined.common.util import yaml_safe_load\n",
        "e2e_tests/t.py": "import determined as det\ndet.errors.Oops\n",
    })
    data = _script().build(tmp_path, "9.9", {})
    names = {(e["module"], e["name"]): e for e in data["names"]}
    assert names[("determined", "Thing")]["signature"] == [
        {"name": "x", "kind": "POSITIONAL_OR_KEYWORD"},
        {"name": "y", "kind": "POSITIONAL_OR_KEYWORD", "default": "None"}]
    assert names[("determined", "Thing.prop")]["kind"] == "property"
    assert names[("determined", "Thing.build")]["kind"] == "classmethod"
    assert names[("determined", "Thing.x")]["kind"] == "attribute"
    assert names[("determined", "Thing.Mode.A")]["value"] == "1"
    assert names[("determined", "Thing.inherited")]["inherited_from"] == "determined._a.Base"
    assert names[("determined", "make")]["signature"][1] == {"name": "args",
                                                            "kind": "VAR_POSITIONAL"}
    assert names[("determined", "core")]["kind"] == "module"
    assert names[("determined.core", "init")]["signature"] == [
        {"name": "distributed", "kind": "KEYWORD_ONLY", "default": "None"}]
    assert names[("determined.launch.wrap_rank", "--trial")]["kind"] == "cli_option"
    assert ("determined.util", "merge_dicts") in names
    assert ("determined.util", "unused") not in names          # no example uses it
    assert ("determined.common.util", "yaml_safe_load") in names
    assert ("determined.errors", "Oops") in names
    assert not {n for _, n in names if n.startswith("_") and n != "__iter__"} - {"__version__"}
    assert ("determined", "os") not in names and ("determined", "_hidden") not in names
    env = {v["name"]: v["found_in"] for v in data["environment"]}
    assert env == {"DET_FROM_GO": ["master/pkg/tasks/t.go:1"],
                   "DET_FROM_HARNESS": [f"{h}/core/_c.py:3"],
                   "DET_FROM_SH": ["master/static/srv/e.sh:1"]}
