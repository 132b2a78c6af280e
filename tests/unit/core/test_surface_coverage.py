"""tests.surface_coverage: when a served name of Determined's counts as run in a job, and
the tracer (tests/fixtures/surface_trace) that records the calls."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import surface_coverage as sc

REPO = Path(__file__).resolve().parents[3]
TRAIN = "dethpc.core._train:TrainContext"
DUMMY_TRAIN = "dethpc.core._train:DummyTrainContext"
TRIAL = "dethpc.pytorch._trial:PyTorchTrial"
TORCH_LAUNCH = "python3 -m determined.launch.torch_distributed"


@pytest.fixture(scope="module")
def entries() -> dict[str, dict]:
    return {e["key"]: e for e in sc.required(sc.load_inventory())}


CASES = [
    # (key, calls, names, entrypoints, exercised)
    ("determined.core.TrainContext.set_status",
     [sc.Call("dethpc.core._train", "TrainContext.set_status", (TRAIN,))], set(), [], True),
    ("determined.core.TrainContext.set_status", [], {"set_status"}, [], False),
    # a Dummy name needs the Dummy twin; the real class is not enough
    ("determined.core.DummyTrainContext.set_metadata",
     [sc.Call("dethpc.core._train", "TrainContext.set_metadata", (TRAIN,))], set(), [], False),
    ("determined.core.DummyTrainContext.set_metadata",
     [sc.Call("dethpc.core._train", "DummyTrainContext.set_metadata", (DUMMY_TRAIN, TRAIN))],
     set(), [], True),
    # the user's override of a PyTorchTrial method, called by the Trainer
    ("determined.pytorch.PyTorchTrial.train_batch",
     [sc.Call("trial", "CompatTrial.train_batch", (TRIAL,))], set(), [], True),
    ("determined.pytorch.PyTorchTrial.train_batch",
     [sc.Call("trial", "CompatTrial.evaluate_batch", (TRIAL,))], set(), [], False),
    # a module-level function: the very function ran
    ("determined.import_from_path",
     [sc.Call("dethpc.core._imports", "import_from_path", ())], set(), [], True),
    ("determined.import_from_path", [], {"import_from_path"}, [], False),
    # attributes and enums: named by a program
    ("determined.TrialInfo.trial_seed", [], {"trial_seed"}, [], True),
    ("determined.TrialInfo.trial_seed", [], {"trial_id"}, [], False),
    ("determined.core.Unit", [], {"Unit"}, [], True),
    # a launcher's options: spelled by an entrypoint
    ("determined.launch.torch_distributed.--trial", [], set(),
     [f"{TORCH_LAUNCH} --trial t:T"], True),
    ("determined.launch.torch_distributed.--trial", [], set(),
     [f"{TORCH_LAUNCH} python3 t.py"], False),
    ("determined.launch.torch_distributed.script", [], set(),
     [f"{TORCH_LAUNCH} python3 t.py"], True),
    ("determined.launch.torch_distributed.script", [], set(),
     [f"{TORCH_LAUNCH} --trial t:T"], False),
    ("determined.launch.torch_distributed", [], {"torch_distributed"}, [], False),
]


@pytest.mark.parametrize("key,calls,names,entrypoints,exercised", CASES)
def test_exercised(entries: dict[str, dict], key: str, calls: list[sc.Call],
                   names: set[str], entrypoints: list[str], exercised: bool) -> None:
    cov = sc.Coverage(set(calls), names, entrypoints)
    assert cov.exercised(entries[key]) is exercised


def test_required_is_served_and_served_differently_and_exempt_is_a_part(
        entries: dict[str, dict]) -> None:
    # 415 + the DeepSpeed Trial API + determined.launch.wrap_rank (issue 45 item 3)
    # + run_cross_slot_reduction (3 contexts) and the trial classes (2 x 2)
    assert len(entries) == 485
    assert set(sc.EXEMPT) <= set(entries)
    assert "determined.core.TrainContext.report_early_exit" in entries   # differently
    assert "determined.pytorch.PyTorchTrial.train_batch" in entries      # served


def test_names_in_reads_attributes_names_and_imports() -> None:
    src = "import dethpc as det\nfrom a.b import c\nx = det.core.Unit.BATCHES\nlen(y)\n"
    assert {"dethpc", "a", "b", "c", "det", "core", "Unit", "BATCHES", "len",
            "y"} <= sc.names_in([src])


def test_the_tracer_records_dethpc_calls_and_subclass_methods(tmp_path: Path) -> None:
    program = tmp_path / "p.py"
    program.write_text(
        "import dethpc\n"
        "class Mine(dethpc.core.DummyTrainContext):\n"
        "    def extra(self):\n"
        "        return 1\n"
        "t = Mine()\n"
        "t.set_status('x')\n"
        "t.extra()\n")
    trace = tmp_path / "trace"
    trace.mkdir()
    env = {**os.environ, "DETHPC_SURFACE_TRACE": str(trace),
           "PYTHONPATH": os.pathsep.join([str(REPO / "tests" / "fixtures" / "surface_trace"),
                                          str(REPO)])}
    subprocess.run([sys.executable, str(program)], env=env, check=True, timeout=120)
    calls = sc.read_traces(trace)
    mine = [c for c in calls if c.qualname == "Mine.extra"]
    assert mine and DUMMY_TRAIN in mine[0].receiver and TRAIN in mine[0].receiver
    status = [c for c in calls if c.qualname.endswith(".set_status")]
    assert status and status[0].module == "dethpc.core._train"
    # without the variable the tracer writes nothing
    del env["DETHPC_SURFACE_TRACE"]
    subprocess.run([sys.executable, str(program)], env=env, check=True, timeout=120)
    assert len(list(trace.glob("*.json"))) == 1
