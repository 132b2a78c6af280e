"""The site facts kept across processes (``dethpc.backends.slurm_site_cache``, issue 48)
against the real dev cluster: the first process asks Slurm (``scontrol show config``,
``sinfo``, ``scontrol show federation``), a second one with the same ``DETHPC_HOME`` and
slurm.conf asks nothing and gets the same answers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.spanning

#: one process: a Slurm backend the CLI's way (``keep_site_facts``), each site fact asked
SCRIPT = """
import json
from dethpc.backends.slurm import SlurmBackend
from dethpc.common.runner import RecordingRunner
from dethpc.surfaces.cli.common import keep_site_facts

runner = RecordingRunner(timeout=30.0)
backend = SlurmBackend(runner, user=None)
keep_site_facts(backend)
facts = {"max_array_size": backend.max_array_size(),
         "accounting": backend.accounting_enabled(),
         "partitions": sorted((p.name, p.nodes, p.time_limit_s)
                              for p in backend.partitions().values()),
         "local_only": backend.site.local_only()}
print(json.dumps({"calls": [list(c) for c in runner.calls], "facts": facts}))
"""


def _process(home: Path) -> dict[str, Any]:
    env = {**os.environ, "DETHPC_HOME": str(home)}
    res = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                         text=True, timeout=120, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_a_second_process_asks_slurm_nothing_for_the_site(slurm_cluster: Any,
                                                          tmp_path: Path) -> None:
    home = tmp_path / "home"
    first = _process(home)
    assert [c[:3] for c in first["calls"]] == [
        ["scontrol", "show", "config"], ["sinfo", "-h", "-o"],
        ["scontrol", "show", "federation"]]
    assert first["facts"]["partitions"]
    kept = list(home.glob("slurm-site-*.json"))
    assert len(kept) == 1 and kept[0].stat().st_mode & 0o077 == 0
    second = _process(home)
    assert second["calls"] == []
    assert second["facts"] == first["facts"]
    kept[0].unlink()                                  # cleared: asked again
    assert len(_process(home)["calls"]) == 3
