"""``LocalBackend``'s signal to a task that is starting: not dropped."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from pathlib import Path

from dethpc.backends.local import LocalBackend


def test_a_signal_to_a_task_being_recorded_running_reaches_it(tmp_path: Path) -> None:
    """The supervisor starts the script, then records it running: a signal in between
    (the script is already visible, e.g. it touched a file) waits for the record
    instead of being dropped (f31: a job signalled then ran on until the test gave up)."""
    backend = LocalBackend(tmp_path / "spool")
    task = backend.spool.task("1")
    task.root.mkdir(parents=True)
    task.state.write_text(json.dumps({"state": "pending", "restart_count": 0}))
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)

    def record_running() -> None:
        time.sleep(0.5)
        task.state.write_text(json.dumps({"state": "running", "pid": proc.pid,
                                          "pgid": proc.pid}))

    recorder = threading.Thread(target=record_running)
    recorder.start()
    try:
        backend.cancel(["1"], signal="TERM")
        assert proc.wait(timeout=30) == -signal.SIGTERM
    finally:
        recorder.join()
        proc.kill()
