"""bench/suite_cpu: the ledger's roles and the summary's sums (table-driven), and one real
process through the installed ``.pth`` (a venv's Python writes exactly one line)."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import sysconfig
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[3] / "bench" / "suite_cpu"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"suite_cpu_{name}", BENCH / f"{name}.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize(("argv", "env", "role"), [
    (["/v/bin/dethpc", "experiment", "list"], {}, "cli"),
    (["/v/bin/dethpc", "--json", "daemon", "run"], {}, "daemon"),
    (["/v/bin/dethpc", "daemon", "status"], {}, "cli"),
    (["/v/bin/pytest", "-q"], {}, "pytest"),
    (["-c"], {"PYTEST_XDIST_WORKER": "gw1"}, "pytest"),
    (["-m"], {"SLURM_JOB_ID": "12"}, "job"),
    (["train.py"], {"DETHPC_TRIAL_ID": "3"}, "job"),
    (["-c"], {}, "other"),
])
def test_roles(argv: list[str], env: dict[str, str], role: str,
               monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("PYTEST_XDIST_WORKER", "SLURM_JOB_ID", "DETHPC_TRIAL_ID", "DETHPC_RUN_DIR"):
        monkeypatch.delenv(name, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    ledger = _load("ledger")
    monkeypatch.setattr(ledger.sys, "modules", {k: v for k, v in sys.modules.items()
                                                 if k != "xdist"})
    assert ledger._role(argv) == role


def test_summary_sums_by_role_and_command() -> None:
    summarize = _load("summarize").summarize
    lines = [
        {"role": "cli", "argv": ["dethpc", "experiment", "list"], "user_s": 1.0, "sys_s": 0.5},
        {"role": "cli", "argv": ["dethpc", "experiment", "list"], "user_s": 0.5, "sys_s": 0.0},
        {"role": "cli", "argv": ["dethpc", "submit", "x.yaml"], "user_s": 2.0, "sys_s": 0.0},
        {"role": "job", "argv": ["-m"], "module": "dethpc.launch.run_start",
         "user_s": 0.5, "sys_s": 0.5},
    ]
    s = summarize(lines)
    assert s["processes"] == 4 and s["python_cpu_s"] == 5.0
    assert s["by_role"]["cli"] == {"processes": 3, "cpu_s": 4.0, "share_of_python": 0.8,
                                   "cpu_s_per_process": 1.333}
    assert s["cli_top_commands"] == [  # by CPU, then by name
        {"command": "experiment list", "runs": 2, "cpu_s": 2.0},
        {"command": "submit x.yaml", "runs": 1, "cpu_s": 2.0}]
    assert s["by_role"]["job-dethpc"]["cpu_s"] == 1.0
    assert s["job_top_modules"] == [{"module": "dethpc.launch.run_start", "cpu_s": 1.0}]


@pytest.mark.parametrize(("argv", "module", "role"), [
    (["/v/bin/dethpc", "experiment", "list"], None, "cli"),
    (["/r/dethpc/surfaces/cli/main.py", "submit", "x.yaml"], "dethpc.surfaces.cli.main", "cli"),
    (["/r/dethpc/surfaces/cli/main.py", "daemon", "run"], "dethpc.surfaces.cli.main", "daemon"),
    (["/r/dethpc/common/supervisor.py", "{}"], "dethpc.common.supervisor", "daemon"),
    (["/r/dethpc/launch/run_end.py"], "dethpc.launch.run_end", "job-dethpc"),
    (["/r/dethpc/surfaces/entry.py", "latest-checkpoint"], "dethpc.surfaces.entry",
     "job-dethpc"),
    (["/r/dethpc/launch/worker/__main__.py"], "dethpc.launch.worker.__main__", "job-dethpc"),
    (["/r/dethpc/launch/_run_main.py", "train.py"], "dethpc.launch._run_main", "training"),
    (["train.py", "--steps", "3"], None, "training"),
    (["-c"], None, "pytest"),
    (["/v/lib/pytest/__main__.py"], "pytest.__main__", "pytest"),
    (["/v/lib/jupyterlab/__main__.py"], "jupyterlab.__main__", "other"),
])
def test_roles_from_what_ran(argv: list[str], module: str | None, role: str) -> None:
    """Every process a test starts inherits pytest-xdist's variables: the summary's role
    comes from argv and the main module, never from the environment."""
    assert _load("summarize").role_of({"argv": argv, "module": module}) == role


def test_installed_pth_writes_one_line_per_process(tmp_path: Path) -> None:
    """The real thing: the .pth in this venv, a child Python, its line (once: the venv's
    lib64 -> lib link runs a .pth twice) -- and nothing without the variable."""
    if os.environ.get("DETHPC_CPU_LEDGER"):
        pytest.skip("a ledger run is on: its .pth must stay until the suite ends")
    purelib = Path(sysconfig.get_paths()["purelib"])
    if not os.access(purelib, os.W_OK):
        pytest.skip("this venv's site-packages is read-only")
    install = [sys.executable, str(BENCH / "install.py")]
    subprocess.run(install, check=True, capture_output=True)
    try:
        ledger = tmp_path / "ledger.jsonl"
        env = {**os.environ, "DETHPC_CPU_LEDGER": str(ledger)}
        env.pop("PYTEST_XDIST_WORKER", None)
        subprocess.run([sys.executable, "-c", "sum(range(10**6))"], env=env, check=True)
        # the measured process ends as it would unmeasured: an unhandled KeyboardInterrupt
        # by SIGINT (an import inside the atexit callback turned it into exit code 1)
        ki = subprocess.run([sys.executable, "-c", "raise KeyboardInterrupt"], env=env,
                            capture_output=True, text=True)
        assert ki.returncode == -signal.SIGINT and "ledger" not in ki.stderr
        env.pop("DETHPC_CPU_LEDGER")
        subprocess.run([sys.executable, "-c", "pass"], env=env, check=True)
    finally:
        subprocess.run([*install, "--remove"], check=True, capture_output=True)
    lines = [json.loads(x) for x in ledger.read_text().splitlines()]
    assert len(lines) == 2          # the sum's and the interrupted one's
    assert lines[0]["role"] == "other" and lines[0]["argv"] == ["-c"]
    assert lines[0]["user_s"] + lines[0]["sys_s"] > 0
