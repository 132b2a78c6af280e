"""What every CLI command shares: the cluster config, the store, the backend, output.

Owns: lazy construction of those (so ``config validate`` needs no database),
JSON/rich printing helpers. Must not: hold logic the library lacks.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from rich.console import Console
from rich.table import Table

from dethpc.backends.base import Backend
from dethpc.config import load_cluster_config
from dethpc.config.model import ClusterConfig
from dethpc.store import Store

console = Console()
err_console = Console(stderr=True)


@dataclass
class Env:
    cluster_path: str | None = None
    overrides: dict[str, Any] = field(default_factory=dict)

    @cached_property
    def cluster(self) -> ClusterConfig:
        return load_cluster_config(self.cluster_path)

    @cached_property
    def store(self) -> Store:
        """The state database: the user's own credentials file when there is one
        (``dethpc.store.credentials``); on a shared database, a normal role must be the
        Unix user's (``dethpc.store.access.check_identity``)."""
        from dethpc.experiments import current_user
        from dethpc.store.access import check_identity
        from dethpc.store.credentials import database_url

        store = Store(database_url(self.cluster) or None)
        m = store.migration
        if m is not None and m.start is not None:  # an existing database was upgraded
            err_console.print(f"dethpc: upgraded database {store.safe_url} from schema "
                              f"revision {m.start} to {m.head} (docs/store.md)")
        check_identity(store.role, current_user(), store.safe_url)
        return store

    @cached_property
    def backend(self) -> Backend:
        from dethpc.backends.factory import make_backend

        return make_backend(self.cluster)


ENV = Env()


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def table(title: str, columns: list[str], rows: list[list[Any]]) -> None:
    t = Table(title=title, show_lines=False)
    for c in columns:
        t.add_column(c, overflow="fold")
    for r in rows:
        t.add_row(*["" if v is None else str(v) for v in r])
    console.print(t)


def fmt_metric(value: float | None) -> str:
    return "" if value is None else f"{value:.6g}"
