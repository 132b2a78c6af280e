"""One JSON line appended to a jobs' record file (dethpc.common.jsonlines.append_record)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dethpc.common.jsonlines import append_record, read_new_lines


@pytest.mark.parametrize(("before", "jobs"), [
    (None, ["new"]),                                       # no file yet
    ("", ["new"]),                                         # empty file
    ('{"job": "old"}\n', ["old", "new"]),                  # whole lines
    ('{"job": "old"}\n{"job": "cu', ["old", "new"]),      # a cut last line: skipped alone
    ('{"job": "cu', ["new"]),
])
def test_the_new_record_is_read_whatever_the_file_ended_with(
        tmp_path: Path, before: str | None, jobs: list[str]) -> None:
    path = tmp_path / "exits.jsonl"
    if before is not None:
        path.write_text(before)
    append_record(path, {"job": "new"})
    assert [r["job"] for r in read_new_lines(path, 0).records] == jobs
    assert path.read_text().endswith('{"job": "new"}\n')
