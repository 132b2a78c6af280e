"""The job-side ``determined`` alias (dethpc.launch.determined_alias): on ``PYTHONPATH``
only when no real Determined is importable, never twice; the alias package maps
``determined.*`` to dethpc's module objects and runs ``determined.launch.*`` as ``-m``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from dethpc.common.jobenv import BY_NAME, ENV_DETERMINED_ALIAS
from dethpc.launch import detenv
from dethpc.launch.determined_alias import ALIAS_DIR, alias_env, real_determined

REPO = Path(__file__).resolve().parents[3]


def fake_determined(root: Path) -> Path:
    (root / "determined").mkdir(parents=True)
    (root / "determined" / "__init__.py").write_text("__version__ = 'real'\n")
    return root


def test_the_alias_joins_the_path_only_without_a_real_determined(tmp_path: Path) -> None:
    assert alias_env({}, path=[]) == {"PYTHONPATH": str(ALIAS_DIR),
                                      ENV_DETERMINED_ALIAS: str(ALIAS_DIR)}
    assert alias_env({"PYTHONPATH": "/x"}, path=[])["PYTHONPATH"] == \
        os.pathsep.join([str(ALIAS_DIR), "/x"])
    real = fake_determined(tmp_path / "site")
    assert real_determined({"PYTHONPATH": str(real)}, path=[]) is not None
    assert alias_env({"PYTHONPATH": str(real)}, path=[]) == {}
    assert alias_env({}, path=[str(real)]) == {}           # installed in the interpreter
    assert alias_env({"PYTHONPATH": str(ALIAS_DIR)}, path=[]) == {}  # never twice
    assert ENV_DETERMINED_ALIAS in BY_NAME


def test_detenv_exports_the_alias_for_a_run_not_per_node(tmp_path: Path, capsys,
                                                         monkeypatch) -> None:
    monkeypatch.delenv("PYTHONPATH", raising=False)
    monkeypatch.setattr(sys, "path", [sys.path[0]])
    detenv.main([])
    assert f"export {ENV_DETERMINED_ALIAS}=" in capsys.readouterr().out
    detenv.main(["--node"])
    assert ENV_DETERMINED_ALIAS not in capsys.readouterr().out


def run(code: str, *pythonpath: Path) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, (ALIAS_DIR, *pythonpath)))}
    return subprocess.run([sys.executable, "-W", "error::ImportWarning", "-c", code],
                          capture_output=True, text=True, env=env, check=True,
                          cwd="/").stdout.strip()


def test_the_alias_is_dethpc_under_determineds_names() -> None:
    out = run("import determined as det, dethpc\n"
              "from determined import pytorch\n"
              "import determined.pytorch, determined.core, determined.errors, "
              "determined.util, determined.launch.torch_distributed as t\n"
              "import dethpc.common.util, dethpc.launch.torch_distributed as t2\n"
              "assert det is dethpc and pytorch is dethpc.pytorch and t is t2\n"
              "assert determined.util is dethpc.common.util\n"
              "assert dethpc.common.util.__spec__.name == 'dethpc.common.util'\n"
              "try:\n    import determined.experimental\nexcept ImportError as e:\n"
              "    print(e)\n", REPO)
    assert out == "No module named 'determined.experimental'"


def test_python_m_determined_launch_runs_dethpcs_launcher() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, (ALIAS_DIR, REPO))),
           "DETHPC_BACKEND": "local", "DETHPC_SLOTS_PER_TRIAL": "1"}
    out = subprocess.run([sys.executable, "-m", "determined.launch.torch_distributed",
                          sys.executable, "-c", "print('rank ran')"],
                         capture_output=True, text=True, env=env, cwd="/", timeout=120)
    assert out.returncode == 0, out.stderr
    assert "rank ran" in out.stdout + out.stderr
    assert "[dethpc.launch]" in out.stdout + out.stderr


def test_a_refused_determined_launcher_says_why_where_it_runs() -> None:
    """``python -m determined.launch.tensorflow`` in a trial's job: the refusal (Determined's
    feature, what to use instead) and exit 2, not ``No module named``; an import of it
    raises ImportError with the same words; an unknown launcher stays unknown."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, (ALIAS_DIR, REPO)))}
    out = subprocess.run([sys.executable, "-m", "determined.launch.tensorflow", "t.py"],
                         capture_output=True, text=True, env=env, cwd="/", timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert "determined.launch.tensorflow cannot run on dethpc" in out.stderr
    assert "run the script directly" in out.stderr
    imported = run("try:\n    import determined.launch.tensorflow\n"
                   "except ImportError as e:\n    print(e)\n", REPO)
    assert imported.startswith("determined.launch.tensorflow cannot run on dethpc")
    unknown = run("try:\n    import determined.launch.nope\n"
                  "except ImportError as e:\n    print(e)\n", REPO)
    assert unknown == "No module named 'determined.launch.nope'"


def test_the_alias_steps_aside_for_a_real_determined_after_it(tmp_path: Path) -> None:
    real = fake_determined(tmp_path / "site")
    out = run("import determined, sys\n"
              "print(determined.__version__, any('alias_path' in p for p in sys.path))",
              REPO, real)
    assert out == "real False"
