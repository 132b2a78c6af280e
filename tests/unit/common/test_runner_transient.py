"""Which failed commands the runner asks again: slurmctld's transient words on stderr,
and the controller-down banner that ``scontrol show config`` prints on stdout (exit 1)
while slurmctld restarts. A real command (bash) fails once, then succeeds."""

from __future__ import annotations

from pathlib import Path

import pytest

from dethpc.common.errors import CommandError
from dethpc.common.runner import CommandRunner, is_transient
from tests.unit.control.test_daemon_unreachable import SHOW_CONFIG_DOWN


@pytest.mark.parametrize(("stderr", "stdout", "transient"), [
    ("scontrol: error: Unable to contact slurm controller (connect failure)", "", True),
    ("", SHOW_CONFIG_DOWN, True),
    ("", "MaxArraySize = 1001\nSlurmctld(primary) at vm is UP\n", False),
    # a non-root user gets no banner (measured on 25.11, the ping refused under rl_enable)
    ("", "SLURM_VERSION           = 25.11.7\nX11Parameters           = (null)\n\n"
         "Slurmctld(primary) at vm is DOWN\n", True),
    ("", "Slurmctld(primary) at vm is UP\nSlurmctld(backup) at vm2 is DOWN\n", True),
    ("sbatch: error: Invalid partition name specified", "", False),
    ("", "", False),
])
def test_is_transient(stderr: str, stdout: str, transient: bool) -> None:
    assert is_transient(stderr, stdout) is transient


def _flaky(tmp_path: Path, stdout: str) -> list[str]:
    """bash that prints ``stdout`` and exits 1 on its first run, then exits 0."""
    (tmp_path / "out.txt").write_text(stdout)
    marker = tmp_path / "ran-once"
    script = (f'if [ -e "{marker}" ]; then echo ok; exit 0; fi; touch "{marker}"; '
              f'cat "{tmp_path / "out.txt"}"; exit 1')
    return ["bash", "-c", script]


def test_controller_down_banner_is_asked_again(tmp_path: Path) -> None:
    result = CommandRunner(retries=2, backoff=0.01).run(_flaky(tmp_path, SHOW_CONFIG_DOWN))
    assert result.returncode == 0 and result.stdout.strip() == "ok"


def test_other_failures_are_not(tmp_path: Path) -> None:
    with pytest.raises(CommandError) as err:
        CommandRunner(retries=2, backoff=0.01).run(_flaky(tmp_path, "something else\n"))
    assert err.value.returncode == 1
