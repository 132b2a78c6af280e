"""The site facts that change only with slurm.conf, kept per user across processes.

Owns: ``SiteCache`` -- one small private JSON file per Slurm client under
``$DETHPC_HOME`` (``slurm-site-<crc>.json``, 0600, written atomically) holding the
answers ``SlurmSite`` would otherwise ask slurmctld for again in every process (issue
48: the CLI's ``dethpc submit`` and the daemon it starts each ran ``scontrol show
config``): ``scontrol show config``'s fields dethpc reads (``CONFIG_KEYS``), ``sinfo``'s
partitions (its text) and whether the cluster is in a federation. Each is used only
while its key holds (``fresh``): the same slurm.conf (the ``SLURM_CONF`` the commands
read, or the path Slurm's config named when none is set: its path, size and
``mtime_ns``, and those of each file it ``Include``s), the same Slurm (the ``scontrol``
on the commands' ``PATH``: its real path, size and ``mtime_ns``), the same user and
``SLURM_CLUSTERS``, and written at most ``MAX_AGE_S`` ago (``scontrol update`` and an
edit not yet reconfigured change the live answers without the file). Any doubt asks
again: no slurm.conf to read (configless Slurm), an ``Include`` it cannot follow (a
pattern, a file missing), a file that cannot be read or parsed, a key that moved while
the answer was asked. Pure pieces with table tests: ``includes``, ``fresh``,
``config_subset``; ``stamp`` reads the files. docs/backends.md ("Site facts kept across
processes") says what is kept and how to clear it.
Must not: run commands, parse Slurm's answers (``slurm_parse`` does) or keep what
changes without slurm.conf (``sbatch --test-only``'s verdict, squeue, the limits and
QoS that ``sacctmgr`` changes).
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import time
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

#: the fields of ``scontrol show config`` that dethpc reads (``slurm_site``,
#: ``slurm_ratelimit``) and so keeps: a field read anywhere must be named here
CONFIG_KEYS = ("MaxArraySize", "AccountingStorageType", "SlurmctldParameters", "SlurmUser",
               "SLURM_CONF", "SLURM_VERSION")
#: a kept answer older than this is asked again (runtime changes slurm.conf does not show)
MAX_AGE_S = 3600.0
#: the file's layout; another is not read
FORMAT = 1
_INCLUDE = re.compile(r"^\s*include\s+(\S+)", re.IGNORECASE | re.MULTILINE)
_PATTERN = re.compile(r"[*?\[%]")

Stamp = list[Any]


# ------------------------------------------------------------------- pure pieces
def includes(conf_text: str, conf_dir: str) -> list[str] | None:
    """The files a slurm.conf's ``Include`` lines name (relative ones under
    ``conf_dir``), in order; None when one is a pattern or holds a ``%`` expansion (no
    way to know which files it reads: ask instead)."""
    out: list[str] = []
    for name in _INCLUDE.findall(conf_text):
        if _PATTERN.search(name):
            return None
        out.append(name if os.path.isabs(name) else os.path.join(conf_dir, name))
    return out


def fresh(record: Mapping[str, Any], stamp_now: Stamp | None, now: float,
          max_age_s: float = MAX_AGE_S) -> bool:
    """Whether ``record`` (a kept file's content) may answer now: the same format, its
    key equal to ``stamp_now`` (None: no key can be made, never), written at most
    ``max_age_s`` ago and not in the future."""
    if stamp_now is None or record.get("format") != FORMAT:
        return False
    at = record.get("at")
    if not isinstance(at, int | float) or not 0 <= now - at <= max_age_s:
        return False
    return record.get("stamp") == stamp_now


def config_subset(config: Mapping[str, str]) -> dict[str, str]:
    """The fields of ``config`` that dethpc reads (``CONFIG_KEYS``), those present."""
    return {k: config[k] for k in CONFIG_KEYS if k in config}


def _file_id(path: str) -> list[Any]:
    st = os.stat(path)
    return [os.path.realpath(path), st.st_size, st.st_mtime_ns]


def stamp(conf: str | None, env: Mapping[str, str], uid: int) -> Stamp | None:
    """The key of the answers Slurm gives now to commands run with ``env`` by ``uid``
    reading slurm.conf ``conf``: see the module docstring. None when any part cannot be
    known."""
    if not conf:
        return None
    scontrol = shutil.which("scontrol", path=env.get("PATH", os.defpath))
    if scontrol is None:
        return None
    try:
        with open(conf, encoding="utf-8", errors="replace") as f:
            text = f.read()
        extra = includes(text, os.path.dirname(conf))
        if extra is None:
            return None
        return [uid, env.get("SLURM_CLUSTERS", ""), _file_id(scontrol), _file_id(conf),
                [_file_id(p) for p in extra]]
    except OSError:
        return None


def _facts(record: Mapping[str, Any] | None) -> dict[str, Any]:
    facts = record.get("facts") if record is not None else None
    return facts if isinstance(facts, dict) else {}


# ------------------------------------------------------------------------ the file
class SiteCache:
    """The kept answers of one Slurm client (the ``SLURM_CONF`` and ``scontrol`` of
    ``env``) in ``home``; see the module docstring. ``get``/``put`` name a fact
    (``config``, ``sinfo``, ``federated``)."""

    def __init__(self, home: Path, env: Mapping[str, str] | None = None,
                 uid: int | None = None, max_age_s: float = MAX_AGE_S) -> None:
        self.env = dict(os.environ if env is None else env)
        self.uid = os.geteuid() if uid is None else uid
        self.max_age_s = max_age_s
        conf_env = self.env.get("SLURM_CONF", "")
        which = shutil.which("scontrol", path=self.env.get("PATH", os.defpath)) or ""
        # one file per client: the SLURM_CONF asked for (none: Slurm's default) and scontrol
        name = zlib.crc32(repr([conf_env, which, self.uid]).encode())
        self.path = Path(home) / f"slurm-site-{name:08x}.json"
        #: the slurm.conf read: SLURM_CONF, or (unset) the path a kept config named
        self.conf: str | None = conf_env or None

    def _read(self) -> dict[str, Any] | None:
        try:
            record = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return None
        return record if isinstance(record, dict) else None

    def key(self, record: Mapping[str, Any] | None = None) -> Stamp | None:
        """The key now: of ``SLURM_CONF``, or of the slurm.conf ``record``'s config
        named (Slurm's default) when it is unset."""
        conf = self.conf
        if conf is None and record is not None:
            config = _facts(record).get("config")
            named = config.get("SLURM_CONF") if isinstance(config, dict) else None
            conf = named if isinstance(named, str) and os.path.isabs(named) else None
        return stamp(conf, self.env, self.uid)

    def get(self, fact: str) -> Any:
        """The kept answer ``fact`` while its key holds, else None."""
        record = self._read()
        if record is None or not fresh(record, self.key(record), time.time(),
                                       self.max_age_s):
            return None
        return _facts(record).get(fact)

    def put(self, fact: str, value: Any, before: Stamp | None) -> None:
        """Keep ``value`` as ``fact`` when the key now is ``before`` (taken before it
        was asked: an answer asked while slurm.conf changed is not kept), beside the
        other facts kept under the same key (a new key starts afresh). Without
        ``SLURM_CONF`` the config itself names the slurm.conf read, so its key is taken
        after it was asked."""
        record = self._read() or {}
        if fact == "config" and self.conf is None:
            record = {"facts": {"config": value}}      # names the default slurm.conf
        now_key = self.key(record)
        default_config = fact == "config" and self.conf is None
        if now_key is None or (now_key != before and not default_config):
            return
        facts = dict(_facts(record)) if fresh(record, now_key, time.time(),
                                                         self.max_age_s) else {}
        facts[fact] = value
        at = record.get("at") if facts.keys() - {fact} else None
        self._write({"format": FORMAT, "stamp": now_key,
                     "at": at if isinstance(at, int | float) else time.time(),
                     "facts": facts})

    def before(self, fact: str) -> Stamp | None:
        """The key to hand ``put`` for ``fact``, taken before asking Slurm."""
        if self.conf is None and fact == "config":
            return None        # the default slurm.conf's path is what config will say
        return self.key(self._read())

    def _write(self, record: Mapping[str, Any]) -> None:
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                json.dump(record, f)
            os.replace(tmp, self.path)
        except OSError as exc:
            log.info("cannot keep the Slurm site's facts in %s: %s", self.path, exc)
            try:
                tmp.unlink()
            except OSError:
                pass

