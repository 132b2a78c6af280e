"""Which commands start the user's daemon at their first line (``dethpc.surfaces.entry``:
``submit`` and ``experiment create`` run here, and only those that start it anyway)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dethpc.surfaces.entry import prestart_wanted


@pytest.mark.parametrize(("args", "wanted"), [
    (["submit", "exp.yaml", "model"], True),
    (["experiment", "create", "exp.yaml", "model"], True),
    (["e", "create", "-c", "x=1", "exp.yaml", "model"], True),
    (["--cluster-config", "c.yaml", "submit", "exp.yaml", "model", "--follow"], True),
    (["submit", "exp.yaml", "model", "--test"], True),
    (["--remote", "off", "submit", "exp.yaml", "model"], True),
    # no daemon wanted, or not a submit
    (["submit", "exp.yaml", "model", "--no-daemon"], False),
    (["submit", "exp.yaml", "model", "--local"], False),
    (["submit", "--help"], False),
    (["submit", "exp.yaml"], False),               # a usage error follows
    (["experiment", "list"], False),
    (["daemon", "start"], False),
    (["sbatch", "job.sh"], False),
    ([], False),
    # forwarded to a login node: the daemon runs there
    (["--remote", "me@login", "submit", "exp.yaml", "model"], False),
    (["--remote"], False),                         # the CLI says what is wrong
])
def test_prestart_wanted(args: list[str], wanted: bool, tmp_path: Path,
                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DETHPC_REMOTE_CONFIG", str(tmp_path / "none.yaml"))
    assert prestart_wanted(args) is wanted


def test_a_remote_config_file_forwards_the_submit_and_starts_no_daemon_here(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "remote.yaml"
    path.write_text("remote: {host: login1}\n")
    monkeypatch.setenv("DETHPC_REMOTE_CONFIG", str(path))
    assert not prestart_wanted(["submit", "exp.yaml", "model"])
    assert prestart_wanted(["--remote", "off", "submit", "exp.yaml", "model"])
    path.write_text("remote: [login1]\n")       # broken: the CLI says so, nothing starts
    assert not prestart_wanted(["submit", "exp.yaml", "model"])
