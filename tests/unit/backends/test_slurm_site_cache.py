"""``dethpc.backends.slurm_site_cache``: the key rules (table-driven), the file, and a
``SlurmSite`` that asks Slurm nothing in a second process while slurm.conf is the same
(issue 48)."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Sequence
from pathlib import Path

import pytest

from dethpc.backends import slurm_site_cache as ssc
from dethpc.backends.slurm_site import SlurmSite
from dethpc.backends.slurm_site_cache import SiteCache, config_subset, fresh, includes, stamp
from dethpc.common.errors import SubmitError
from dethpc.common.runner import CommandResult, CommandRunner


# ------------------------------------------------------------------------- pure rules
@pytest.mark.parametrize(("text", "expected"), [
    ("ClusterName=c\n", []),
    ("Include parts.conf\n", ["/etc/slurm/parts.conf"]),
    ("  include /opt/nodes.conf\nINCLUDE b.conf\n", ["/opt/nodes.conf", "/etc/slurm/b.conf"]),
    ("#Include x.conf\n", []),                           # a comment
    ("Include nodes*.conf\n", None),                     # a pattern: which files?
    ("Include /etc/slurm/%c.conf\n", None),              # an expansion
    ("Include a.conf\nInclude n[1-3].conf\n", None),
])
def test_includes(text: str, expected: list[str] | None) -> None:
    assert includes(text, "/etc/slurm") == expected


KEY = [0, "", ["/usr/bin/scontrol", 10, 1], ["/etc/slurm/slurm.conf", 5, 2], []]


def _record(**changes: object) -> dict[str, object]:
    return {"format": ssc.FORMAT, "stamp": KEY, "at": 1000.0, "facts": {}, **changes}


@pytest.mark.parametrize(("record", "now_key", "now", "ok"), [
    (_record(), KEY, 1000.0, True),
    (_record(), KEY, 1000.0 + ssc.MAX_AGE_S, True),                  # the last second
    (_record(), KEY, 1000.0 + ssc.MAX_AGE_S + 1, False),             # too old
    (_record(), KEY, 999.0, False),                                  # written "later"
    (_record(), None, 1000.0, False),                                # no key now
    (_record(stamp=[*KEY[:3], ["/etc/slurm/slurm.conf", 6, 2], []]), KEY, 1000.0,
     False),                                                         # slurm.conf's size
    (_record(stamp=[*KEY[:3], ["/etc/slurm/slurm.conf", 5, 3], []]), KEY, 1000.0,
     False),                                                         # its mtime
    (_record(stamp=[0, "", ["/usr/bin/scontrol", 11, 1], *KEY[3:]]), KEY, 1000.0,
     False),                                                         # another Slurm
    (_record(stamp=[1, *KEY[1:]]), KEY, 1000.0, False),              # another user
    (_record(stamp=[0, "c2", *KEY[2:]]), KEY, 1000.0, False),        # SLURM_CLUSTERS
    (_record(format=ssc.FORMAT + 1), KEY, 1000.0, False),            # another layout
    (_record(at="x"), KEY, 1000.0, False),
])
def test_fresh(record: dict[str, object], now_key: list[object] | None, now: float,
               ok: bool) -> None:
    assert fresh(record, now_key, now) is ok


def test_config_subset_keeps_only_the_fields_dethpc_reads() -> None:
    assert config_subset({"MaxArraySize": "1001", "ClusterName": "c", "SlurmUser":
                          "slurm(64030)"}) == {"MaxArraySize": "1001",
                                               "SlurmUser": "slurm(64030)"}


@pytest.fixture
def slurm(tmp_path: Path) -> dict[str, str]:
    """A slurm.conf (including a second file) and an ``scontrol`` on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scontrol = bin_dir / "scontrol"
    scontrol.write_text("#!/bin/sh\n")
    scontrol.chmod(0o755)
    (tmp_path / "slurm.conf").write_text("ClusterName=c\nInclude parts.conf\n")
    (tmp_path / "parts.conf").write_text("PartitionName=p Nodes=n1\n")
    return {"SLURM_CONF": str(tmp_path / "slurm.conf"), "PATH": str(bin_dir)}


def _touch_later(path: Path) -> None:
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))


@pytest.mark.parametrize("change", [
    "edit slurm.conf", "touch slurm.conf", "edit the included file", "touch scontrol",
    "another SLURM_CLUSTERS", "another uid"])
def test_stamp_changes_with_each_input(slurm: dict[str, str], tmp_path: Path,
                                       change: str) -> None:
    conf, env, uid = slurm["SLURM_CONF"], dict(slurm), 1000
    first = stamp(conf, env, uid)
    assert first is not None and first == stamp(conf, env, uid)
    if change == "edit slurm.conf":
        with open(conf, "a") as f:
            f.write("MaxArraySize=5\n")
    elif change == "touch slurm.conf":
        _touch_later(Path(conf))
    elif change == "edit the included file":
        (tmp_path / "parts.conf").write_text("PartitionName=p Nodes=n[1-2]\n")
    elif change == "touch scontrol":
        _touch_later(tmp_path / "bin" / "scontrol")
    elif change == "another SLURM_CLUSTERS":
        env["SLURM_CLUSTERS"] = "other"
    else:
        uid = 1001
    assert stamp(conf, env, uid) != first


@pytest.mark.parametrize("case", ["no conf named", "conf missing", "include missing",
                                  "include pattern", "no scontrol"])
def test_no_stamp_on_any_doubt(slurm: dict[str, str], tmp_path: Path, case: str) -> None:
    conf, env = slurm["SLURM_CONF"], dict(slurm)
    if case == "no conf named":
        conf = ""
    elif case == "conf missing":
        os.unlink(conf)
    elif case == "include missing":
        os.unlink(tmp_path / "parts.conf")
    elif case == "include pattern":
        Path(conf).write_text("Include parts*.conf\n")
    else:
        env["PATH"] = str(tmp_path / "empty")
    assert stamp(conf, env, 0) is None


# ----------------------------------------------------------------------------- the file
def test_a_kept_fact_is_read_back_while_its_key_holds(slurm: dict[str, str],
                                                      tmp_path: Path) -> None:
    home = tmp_path / "home"
    cache = SiteCache(home, slurm)
    assert cache.get("sinfo") is None
    cache.put("sinfo", "p|1|4|gpu:4|1:00:00\n", cache.before("sinfo"))
    cache.put("federated", False, cache.before("federated"))
    again = SiteCache(home, slurm)                     # another process
    assert again.get("sinfo") == "p|1|4|gpu:4|1:00:00\n"
    assert again.get("federated") is False
    assert stat.S_IMODE(again.path.stat().st_mode) == 0o600
    assert [p.name for p in home.iterdir()] == [again.path.name]     # no temporary left
    _touch_later(Path(slurm["SLURM_CONF"]))
    assert again.get("sinfo") is None and again.get("federated") is None


def test_an_answer_asked_while_slurm_conf_changed_is_not_kept(slurm: dict[str, str],
                                                              tmp_path: Path) -> None:
    cache = SiteCache(tmp_path / "home", slurm)
    before = cache.before("sinfo")
    _touch_later(Path(slurm["SLURM_CONF"]))            # while sinfo ran
    cache.put("sinfo", "p|1|4|gpu:4|1:00:00\n", before)
    assert cache.get("sinfo") is None
    assert not cache.path.exists()


def test_an_old_or_unreadable_file_answers_nothing(slurm: dict[str, str], tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    cache = SiteCache(tmp_path / "home", slurm)
    cache.put("federated", True, cache.before("federated"))
    assert cache.get("federated") is True
    now = ssc.time.time()
    monkeypatch.setattr(ssc.time, "time", lambda: now + ssc.MAX_AGE_S + 1)
    assert cache.get("federated") is None
    for text in ("{", "[]", json.dumps({"format": ssc.FORMAT, "facts": []})):
        cache.path.write_text(text)
        assert cache.get("federated") is None


def test_without_slurm_conf_set_the_config_names_the_file_to_key_on(
        slurm: dict[str, str], tmp_path: Path) -> None:
    """No SLURM_CONF: the client reads Slurm's default slurm.conf, whose path the config
    says (``SLURM_CONF``); kept once that file is known, nothing kept when the config
    names none (configless Slurm)."""
    env = {"PATH": slurm["PATH"]}
    home = tmp_path / "home"
    cache = SiteCache(home, env)
    assert cache.before("sinfo") is None                     # no file known yet
    cache.put("sinfo", "x", cache.before("sinfo"))
    assert cache.get("sinfo") is None
    cache.put("config", {"MaxArraySize": "7"}, cache.before("config"))   # names none
    assert cache.get("config") is None
    config = {"MaxArraySize": "7", "SLURM_CONF": slurm["SLURM_CONF"]}
    cache.put("config", config, cache.before("config"))
    cache.put("sinfo", "x", cache.before("sinfo"))
    again = SiteCache(home, env)
    assert again.get("config") == config and again.get("sinfo") == "x"
    _touch_later(Path(slurm["SLURM_CONF"]))
    assert again.get("config") is None


def test_an_unwritable_home_keeps_nothing_and_raises_nothing(slurm: dict[str, str],
                                                             tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    cache = SiteCache(blocker / "home", slurm)
    cache.put("federated", True, cache.before("federated"))
    assert cache.get("federated") is None


# ----------------------------------------------------------------- the site with a cache
CONFIG = "MaxArraySize = 77\nAccountingStorageType = accounting_storage/none\nX = y\n"
SINFO = "p|2|4|gpu:4|1:00:00\n"


class Counting(CommandRunner):
    """Answers scontrol show config/federation and sinfo; remembers every argv."""

    def __init__(self, sinfo: str = SINFO) -> None:
        super().__init__()
        self.sinfo = sinfo
        self.calls: list[tuple[str, ...]] = []

    def run(self, argv: Sequence[str], **_: object) -> CommandResult:  # type: ignore[override]
        self.calls.append(tuple(argv))
        out = {"config": CONFIG, "federation": ""}.get(argv[-1], "")
        return CommandResult(tuple(argv), 0, self.sinfo if argv[0] == "sinfo" else out, "")


def _use(site: SlurmSite) -> None:
    assert site.max_array_size() == 77
    assert not site.accounting_enabled()
    site.check_pool("p", None, 2, 4, 4)
    assert site.local_only()


def test_a_second_process_asks_slurm_nothing(slurm: dict[str, str], tmp_path: Path) -> None:
    home = tmp_path / "home"
    first = Counting()
    _use(SlurmSite(first, None, cache=SiteCache(home, slurm)))
    assert [c[0] for c in first.calls] == ["scontrol", "sinfo", "scontrol"]
    second = Counting()
    _use(SlurmSite(second, None, cache=SiteCache(home, slurm)))
    assert second.calls == []
    without = Counting()                      # no cache: asks as before
    _use(SlurmSite(without, None))
    assert len(without.calls) == 3
    _touch_later(Path(slurm["SLURM_CONF"]))   # slurm.conf changed: ask again
    third = Counting()
    _use(SlurmSite(third, None, cache=SiteCache(home, slurm)))
    assert len(third.calls) == 3


def test_kept_partitions_never_refuse_a_pool_alone(slurm: dict[str, str],
                                                   tmp_path: Path) -> None:
    """Partitions kept before an ``scontrol update`` (slurm.conf unchanged): a pool they
    refuse is checked against a live sinfo, which decides."""
    home = tmp_path / "home"
    SlurmSite(Counting(), None, cache=SiteCache(home, slurm)).partitions()
    grown = Counting(sinfo="p|2|4|gpu:4|1:00:00\nq|1|8|gpu:8|1:00:00\n")
    SlurmSite(grown, None, cache=SiteCache(home, slurm)).check_pool("q", None, 1, 8, 8)
    assert [c[0] for c in grown.calls] == ["sinfo"]
    still = Counting()
    with pytest.raises(SubmitError, match="does not exist"):
        SlurmSite(still, None, cache=SiteCache(home, slurm)).check_pool("r", None, 1, 1, 0)
    assert [c[0] for c in still.calls] == ["sinfo"]
