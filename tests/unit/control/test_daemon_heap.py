"""``dethpc.control.daemon.heap.settle`` in a process of its own (it changes the whole
interpreter's collector, never this test process's): the start-up heap frozen, the young
generation spaced, the collector still on."""

from __future__ import annotations

import json
import subprocess
import sys

from dethpc.control.daemon import heap

PROBE = """
import gc, json
from dethpc.control.daemon.heap import settle
before = gc.get_freeze_count()
settle()
print(json.dumps({"before": before, "frozen": gc.get_freeze_count(),
                  "threshold": gc.get_threshold(), "enabled": gc.isenabled()}))
"""


def test_settle_freezes_the_start_up_heap_and_spaces_young_collections() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                         check=True, timeout=60)
    got = json.loads(out.stdout)
    assert got["before"] == 0 and got["frozen"] > 10_000   # the imported modules' objects
    assert got["threshold"] == [heap.GEN0, heap.GEN1, heap.GEN2]
    assert got["enabled"] is True
