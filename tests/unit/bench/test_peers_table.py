"""bench/peers/table.py: the small cell's Markdown table, from a run.py result as it is
written now (its ``limit`` names the seeds it was drawn for beside the limits)."""

from __future__ import annotations

from typing import Any

from bench.peers.table import table

ROW = {"time_to_target_median_s": 13.3, "time_to_target_min_s": 9.2,
       "time_to_target_max_s": 20.3, "reached_target": 5, "seeds": 5,
       "efficiency_vs_limit": 0.17, "wall_median_s": 47.9, "slot_seconds_median": 79.0,
       "rpcs_per_min_median": 22.5, "login_cpu_s_median": 4.6,
       "batches_trained_median": 3232.0, "jobs_median": 2.0, "disk_files_median": 365.0}


def test_a_row_per_system_and_per_limit_and_the_seeds_key_is_not_a_limit() -> None:
    doc: dict[str, Any] = {"summary": {"dethpc-pool": ROW}, "limit": {
        "seeds": [0, 1, 2],
        "asha_stopping": {"time_to_target_s": [5.0, None, 1.0], "total_time_s": [26.0, 24.0,
                                                                                 12.0]}}}
    lines = table(doc).splitlines()
    assert lines[2].startswith("| `dethpc-pool` | 13.3 s (9.2-20.3) | 5/5 | 0.17 | 47.9 s |")
    assert lines[3].startswith("| limit: asha stopping, every cost 0 | 3.0 s (1.0-5.0) | 2/3 |")
    assert len(lines) == 4
