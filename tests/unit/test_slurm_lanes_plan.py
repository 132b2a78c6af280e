"""The Slurm lanes of the test suite (tests/slurm_lanes.py, tests/conftest.py): a lane
that runs low takes the longest file left; a spanning test's variant for another Slurm
release goes to that release's lane and never counts in Debian's lanes' durations."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import release_of_nodeid
from tests.slurm_lanes import durations_from_junit, next_file


def test_the_longest_file_left_goes_first() -> None:
    durations = {"a": 100.0, "b": 60.0, "c": 50.0, "d": 10.0}
    files = ["d", "c", "e", "b", "a"]
    taken = []
    while (f := next_file(files, durations)) is not None:
        taken.append(f)
        files.remove(f)
    # e is not listed: DEFAULT_S (60), after b by name
    assert taken == ["a", "b", "e", "c", "d"]
    assert next_file([], durations) is None


@pytest.mark.parametrize(("nodeid", "release"), [
    ("tests/slurm/test_x.py::test_y", None),
    ("tests/slurm/test_x.py::test_y[slurm-25.11]", "25.11"),
    ("tests/slurm/test_x.py::test_y[slurm-22.05]", "22.05"),
    ("tests/slurm/test_x.py::test_y[srun-shape0-slurm-25.11]", "25.11"),
    ("tests/slurm/test_x.py::test_y[slurm-25.11-stopping]", "25.11"),
    ("tests/slurm/test_x.py::test_y[myslurm-25.11]", None),
    ("tests/slurm/test_x.py::test_slurm-25.11", None),
])
def test_release_of_nodeid(nodeid: str, release: str | None) -> None:
    assert release_of_nodeid(nodeid) == release


def test_durations_leave_out_the_other_releases_variants(tmp_path: Path) -> None:
    xml = tmp_path / "j.xml"
    xml.write_text(
        '<testsuites><testsuite>'
        '<testcase classname="tests.slurm.test_x" name="test_a[slurm-22.05]" time="10"/>'
        '<testcase classname="tests.slurm.test_x" name="test_a[slurm-25.11]" time="30"/>'
        '<testcase classname="tests.slurm.test_x" name="test_b" time="5"/>'
        '<testcase classname="tests.unit.test_u" name="test_c" time="7"/>'
        '</testsuite></testsuites>')
    assert durations_from_junit(xml) == {"tests/slurm/test_x.py": 15.0}
