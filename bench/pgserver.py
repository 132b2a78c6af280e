"""The benchmarks' way to tests/pg's throwaway PostgreSQL server (bench/daemon_cost and
bench/tick_scale start it for their PostgreSQL cells).

Owns ``pgserver()``: this checkout's ``tests/pg/pgserver.py``, loaded once by its path
(as ``dethpc_bench_pgserver``). By its path, not ``import tests.pg.pgserver``: both
benchmarks' ``--trees`` put an older tree first on ``sys.path``, whose ``tests``
package may lack the module or hold an older one.
Must not: import dethpc or pytest (it is loaded beside any tree).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

PGSERVER = Path(__file__).resolve().parents[1] / "tests" / "pg" / "pgserver.py"
NAME = "dethpc_bench_pgserver"


def pgserver() -> ModuleType:
    """``tests/pg/pgserver.py`` of this checkout (``.PgServer``, ``.bindir``)."""
    if NAME in sys.modules:
        return sys.modules[NAME]
    spec = importlib.util.spec_from_file_location(NAME, PGSERVER)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[NAME] = mod      # its dataclass looks its module up there
    spec.loader.exec_module(mod)
    return mod
