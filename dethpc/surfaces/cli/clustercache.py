"""What the read commands need of the cluster config, saved so that they need not parse it.

Owns: ``ReadFacts`` (what the light paths ask of the validated cluster config: its
backend and whether it names a database of its own, for ``dethpc.surfaces.cli.fastread``;
the ``SbatchSite`` of ``dethpc sbatch``'s, ``fastsbatch``) and
``read_facts(path, load)``: those facts from the copy saved under the same key, else from
``load()`` (the full load and validation, ``clusterenv.effective_cluster``), saved for next
time. Why (issue 47): importing YAML and the config parsers and validating the file was
50-65 ms of a ~250 ms ``experiment list`` under load; reading this copy is one ``open``.

The copy is used only when every input of the validation is the same (else the config is
loaded and checked as always): the file found (``dethpc.config.locate``: the
``$DETHPC_CLUSTER_CONFIG``, user and site lookup) byte for byte (its whole text is kept in
the copy and compared, so an edit within the file system's timestamp granularity still
counts), the files the validation checks exist (``slurm_bin``'s ``sbatch``,
``slurm_conf``), the validating code (dethpc's version, the ``dethpc.config`` sources'
names, sizes and mtimes, and ``sbatchwrap/site.py``'s, which makes the site), ``HOME``
and ``DETHPC_HOME``. Without a file (Slurm's answers or
the built-in defaults) nothing is saved: detection may probe Slurm and say so each time.
A config that fails validation is never saved (the CLI says what is wrong). Copies live in
``$XDG_CACHE_HOME/dethpc/`` (``~/.cache/dethpc/``) beside ``--help``'s
(``helpcache``); one that cannot be read or written is simply not used.
Must not: import YAML, the config parsers or models, typer or rich.
"""

from __future__ import annotations

import json
import os
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dethpc.common.version import __version__
from dethpc.config import locate
from dethpc.surfaces.sbatchwrap import site as sbatch_site
from dethpc.surfaces.sbatchwrap.site import SbatchSite

if TYPE_CHECKING:
    from dethpc.config.model import ClusterConfig

#: the sources of the validation (``dethpc.config``): a change there is a new key
_CONFIG_DIR = os.path.dirname(os.path.abspath(locate.__file__))
#: the code that makes the saved site from the config: a change there is a new key too
_SITE_SOURCE = os.path.abspath(sbatch_site.__file__)


@dataclass(frozen=True)
class ReadFacts:
    """What the read path needs of a valid cluster config."""

    backend: str
    #: ``database_url`` or ``database_url_file`` set: not the default SQLite file
    own_database: bool
    #: what ``dethpc sbatch`` needs of it (None: not known, the command loads the config)
    sbatch: SbatchSite | None = None

    @classmethod
    def of(cls, cluster: ClusterConfig) -> ReadFacts:
        return cls(backend=str(cluster.backend),
                   own_database=bool(cluster.database_url)
                   or cluster.database_url_file is not None,
                   sbatch=SbatchSite.of(cluster))


def read_facts(path: str | None, load: Callable[[], ClusterConfig]) -> ReadFacts:
    """The facts of the config ``load`` would return for the ``--cluster-config`` value
    ``path`` (None: the lookup), from the saved copy when its key and the file's text are
    the same; else ``load()`` (its ``DethpcError`` propagates), then saved."""
    before = _inputs(path)
    if before is not None:
        hit = _saved(*before)
        if hit is not None:
            return hit
    cluster = load()
    facts = ReadFacts.of(cluster)
    if before is not None and _inputs(path) == before:   # unchanged while it was loaded
        needs = [str(cluster.slurm_bin / "sbatch")] if cluster.slurm_bin is not None else []
        if cluster.slurm_conf is not None:
            needs.append(str(cluster.slurm_conf))
        _save(*before, facts, needs)
    return facts


def _inputs(path: str | None) -> tuple[str, bytes] | None:
    """The key (one line) and the file's text, or None: no file to key on (detection or
    the built-in defaults) or one that cannot be read (the load says why)."""
    found = locate.find_cluster_config(path)
    if found is None:
        return None
    try:
        with open(found, "rb") as f:
            text = f.read()
    except OSError:
        return None
    # its real path: relative paths in it (slurm_bin, slurm_conf) are relative to its folder
    parts: list[object] = [__version__, os.path.realpath(found), os.environ.get("HOME"),
                           os.environ.get("DETHPC_HOME")]
    try:
        for entry in sorted(os.scandir(_CONFIG_DIR), key=lambda e: e.name):
            if entry.name.endswith(".py"):
                st = entry.stat()
                parts.append((entry.name, st.st_size, st.st_mtime_ns))
        st = os.stat(_SITE_SOURCE)
        parts.append((_SITE_SOURCE, st.st_size, st.st_mtime_ns))
    except OSError:
        return None
    return repr(parts).replace("\n", " "), text


def _file(key: str) -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"),
                                                            ".cache")
    return os.path.join(base, "dethpc", f"cluster-{zlib.crc32(key.encode()):08x}.txt")


def _saved(key: str, text: bytes) -> ReadFacts | None:
    """The copy's facts when it holds ``key`` and ``text`` and the files its validation
    checked still exist; else None."""
    try:
        with open(_file(key), "rb") as f:
            if f.readline() != key.encode() + b"\n":
                return None
            record = json.loads(f.readline())
            if f.read() != text:
                return None
        if not all(os.path.isfile(p) for p in record["needs"]):
            return None
        return ReadFacts(backend=str(record["backend"]),
                         own_database=bool(record["own_database"]),
                         sbatch=SbatchSite.from_json(record["sbatch"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _save(key: str, text: bytes, facts: ReadFacts, needs: list[str]) -> None:
    from dethpc.surfaces.cli.helpcache import save_keyed

    record = {"backend": facts.backend, "own_database": facts.own_database, "needs": needs,
              "sbatch": None if facts.sbatch is None else facts.sbatch.to_json()}
    save_keyed(_file(key), key, json.dumps(record).encode() + b"\n" + text)
