"""``dethpc daemon stop`` through the console entry's light path
(``dethpc.surfaces.cli.fastdaemon``): with a real daemon running and with none, the same
stdout, stderr and exit code as the typer command (``python -m dethpc.surfaces.cli.main``),
the daemon and its supervisor gone, and none of typer, click, SQLAlchemy, sqlmodel,
pydantic or the daemon loop imported. Anything but exactly ``daemon stop`` is the full
CLI's."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dethpc.control import service
from dethpc.surfaces.cli import fastdaemon
from tests.local.conftest import cli

FORBIDDEN = {"typer", "click", "sqlalchemy", "sqlmodel", "pydantic", "alembic"}
#: the console script's main in this process, which says at exit what it imported
DRIVER = """
import atexit, json, os, sys
atexit.register(lambda: open(os.environ["MODULES_OUT"], "w").write(json.dumps(sorted(sys.modules))))
from dethpc.surfaces.entry import main
main(sys.argv[1:])
"""


def light_stop(tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    out = tmp_path / "modules.json"
    done = subprocess.run([sys.executable, "-c", DRIVER, "daemon", "stop"],
                          env={**os.environ, "MODULES_OUT": str(out)}, capture_output=True,
                          text=True, timeout=120)
    return done, set(json.loads(out.read_text()))


def test_the_same_answers_as_the_typer_command(home: Path, tmp_path: Path) -> None:
    answers = []
    for light in (True, False):
        said = re.match(r"daemon running \(pid (\d+)\)", cli("daemon", "start").stdout)
        assert said is not None
        started = int(said[1])
        assert service.running_pid() == started
        if light:
            done, modules = light_stop(tmp_path)
            assert not {m.split(".")[0] for m in modules} & FORBIDDEN
            assert "dethpc.control.daemon" not in modules
        else:
            done = cli("daemon", "stop", check=False)
        assert (done.returncode, done.stderr) == (0, ""), done.stderr
        assert done.stdout == f"stopped daemon {started}\n"
        assert service.running_pid() is None and service.supervisor_pid() is None
        answers.append((done.returncode, done.stdout.replace(str(started), "PID"), done.stderr))
    assert answers[0] == answers[1]
    # none running: the same sentence, exit 0, both ways
    none_light, _ = light_stop(tmp_path)
    none_full = cli("daemon", "stop", check=False)
    assert (none_light.returncode, none_light.stdout, none_light.stderr) == (
        none_full.returncode, none_full.stdout, none_full.stderr) == (0, "no daemon running\n",
                                                                      "")


@pytest.mark.parametrize("args", [["daemon", "stop", "--help"], ["daemon", "status"],
                                  ["--cluster-config", "c.yaml", "daemon", "stop"],
                                  ["daemon"], ["stop"]])
def test_anything_else_is_the_full_clis(home: Path, args: list[str]) -> None:
    assert fastdaemon.answer(args) is None
