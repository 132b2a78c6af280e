"""A launcher on the local backend starts one rank per slot of the trial.

``examples/digits/const.yaml`` (unchanged but for ``resources.slots_per_trial: 2`` and
the torch launcher in front of its entrypoint, both as ``--config`` overrides a user
would pass), submitted with the CLI: the trial's log shows two ranks of one process
group and the experiment completes. Before the fix the local backend's
``SLURM_NTASKS=1`` won over the trial's slots and one rank trained (found on a GPU
machine, bench/gpu/README.md).
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.local.conftest import REPO, cli

DIGITS = REPO / "examples" / "digits"


def test_two_slots_start_two_ranks_on_the_local_backend(home: Path) -> None:
    out = cli("submit", DIGITS / "const.yaml", DIGITS, "--json",
              "--config", "resources.slots_per_trial=2",
              "--config", "entrypoint=python3 -m dethpc.launch.torch_distributed -- "
                          "python3 train.py",
              "--config", "searcher.max_length.batches=40")
    exp = json.loads(out.stdout)["id"]
    cli("experiment", "wait", exp, "--timeout", "240", timeout=260, check=False)
    desc = json.loads(cli("experiment", "describe", exp, "--json").stdout)
    logs = "".join(p.read_text() for p in Path(desc["run_dir"]).rglob("slurm-*.out"))
    assert "local launch: 2 process(es)" in logs, logs[-3000:]
    assert "rank 0 of 2" in logs and "rank 1 of 2" in logs, logs[-3000:]
    assert desc["state"] == "COMPLETED", (desc["state"], logs[-3000:])
