"""A dev cluster on a second Slurm release (dethpc.devcluster.releases, lanes,
slurm_build): 25.11's lanes own every name, port, directory and database beside the
22.05 lanes, their processes find the built commands first on PATH, their slurm.conf
uses 25.11's spelling, and the build is keyed by the tarball's checked hash."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from dethpc.common.errors import DethpcError
from dethpc.devcluster import lanes, slurm_build
from dethpc.devcluster.layout import render_configs
from dethpc.devcluster.releases import DEFAULT_RELEASE, SlurmRelease

BASE = Path("/x/state")
V25 = SlurmRelease.V25_11


@pytest.mark.parametrize(("text", "release"), [
    (None, SlurmRelease.V22_05), ("", SlurmRelease.V22_05), ("22.05", SlurmRelease.V22_05),
    ("25.11", V25), (" 25.11 ", V25),
])
def test_parse_release(text: str | None, release: SlurmRelease) -> None:
    assert SlurmRelease.parse(text) is release


@pytest.mark.parametrize("bad", ["23.11", "25", "latest"])
def test_an_unknown_release_names_the_allowed_ones(bad: str) -> None:
    with pytest.raises(ValueError, match=r"allowed: 22\.05, 25\.11"):
        SlurmRelease.parse(bad)


@pytest.mark.parametrize(("release", "built", "setting"), [
    (SlurmRelease.V22_05, False, "SlurmctldParameters=preempt_send_user_signal"),
    (V25, True, "PreemptParameters=send_user_signal"),
])
def test_each_release_renders_its_own_spelling(release: SlurmRelease, built: bool,
                                               setting: str) -> None:
    lay = lanes.lane_layout(1, BASE, release)
    assert release.built is built and (lay.slurm_prefix is not None) is built
    conf = render_configs(lay, "pw")[lay.slurm_conf].splitlines()
    assert setting in conf
    other = {"SlurmctldParameters=preempt_send_user_signal",
             "PreemptParameters=send_user_signal"} - {setting}
    assert not other & set(conf)


@pytest.mark.parametrize("lane", [1, 2])
def test_a_25_11_lane_shares_nothing_a_cluster_owns_with_the_22_05_lanes(lane: int) -> None:
    new = lanes.lane_layout(lane, BASE, V25)
    olds = [lanes.lane_layout(k, BASE) for k in range(1, lanes.MAX_LANES + 1)]
    assert new.release is V25 and new.lane == lane
    for old in olds:
        assert not ({old.ctld_port, old.dbd_port, *(n.port for n in old.nodes)}
                    & {new.ctld_port, new.dbd_port, *(n.port for n in new.nodes)})
        assert not set(old.node_names) & set(new.node_names)
        for path in ("slurm_conf", "state_dir", "run_dir", "lock_file"):
            assert getattr(old, path) != getattr(new, path), path
        assert not str(new.state_dir).startswith(f"{old.state_dir}/")
        assert (old.cluster_name, old.db_name) != (new.cluster_name, new.db_name)
    # what every cluster of the host shares
    assert new.shared == BASE and new.mysql_socket == olds[0].mysql_socket
    assert new.site.gres.nodes == (f"s{lane}n1", f"s{lane}n2")
    assert lanes.lane_layout(1, BASE, V25).slurm_etc == Path("/etc/slurm-25.11")


def test_the_environment_of_a_25_11_lane_puts_its_commands_first() -> None:
    lay = lanes.lane_layout(1, BASE, V25)
    prefix = BASE / "slurm" / "25.11"
    env = lanes.lane_env(lay, path=f"/usr/bin:{prefix}/bin:/bin")
    assert env["PATH"] == f"{prefix}/bin:{prefix}/sbin:/usr/bin:/bin"
    assert env["SLURM_CONF"] == "/etc/slurm-25.11/slurm.conf"
    assert env[lanes.RELEASE_ENV] == "25.11" and env[lanes.LANE_ENV] == "1"
    # Debian's release leaves PATH alone
    assert "PATH" not in lanes.lane_env(lanes.lane_layout(1, BASE))


def test_the_release_of_a_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DETHPC_DEVCLUSTER_DIR", str(BASE))
    monkeypatch.delenv(lanes.LANE_ENV, raising=False)
    monkeypatch.delenv(lanes.RELEASE_ENV, raising=False)
    assert lanes.current_release() is DEFAULT_RELEASE
    monkeypatch.setenv(lanes.RELEASE_ENV, "25.11")
    assert lanes.current_layout() == lanes.lane_layout(1, BASE, V25)
    monkeypatch.setenv(lanes.RELEASE_ENV, "9.9")
    with pytest.raises(ValueError, match="allowed"):
        lanes.current_release()


def test_existing_lanes_of_a_release(tmp_path: Path) -> None:
    base = tmp_path / "dc"
    base.mkdir()
    Path(f"{base}-slurm25.11").mkdir()
    assert lanes.existing_lanes(base) == [1]
    assert lanes.existing_lanes(base, V25) == [1]
    Path(f"{base}-slurm25.11-lane2").mkdir()
    assert lanes.existing_lanes(base, V25) == [1, 2]


# ------------------------------------------------------------------ the build
def _source(tmp_path: Path, data: bytes = b"tarball bytes", listed: str | None = None) -> Path:
    d = tmp_path / "src"
    d.mkdir()
    name = V25.traits.tarball
    assert name is not None
    (d / name).write_bytes(data)
    digest = listed or hashlib.sha256(data).hexdigest()
    (d / "SHA256SUMS").write_text(f"0000  other.tar.xz\n{digest}  {name}\n")
    return d


def test_the_tarball_is_checked_against_its_listed_hash(tmp_path: Path) -> None:
    d = _source(tmp_path)
    path, sha = slurm_build.checked_tarball(V25, d)
    assert path == d / "slurm-25.11.7.tar.xz"
    assert sha == hashlib.sha256(b"tarball bytes").hexdigest()
    assert slurm_build.build_prefix(BASE, V25, sha) == BASE / "slurm" / f"25.11-{sha[:12]}"


def test_a_tarball_whose_hash_differs_is_not_built(tmp_path: Path) -> None:
    d = _source(tmp_path, listed="ab" * 32)
    with pytest.raises(DethpcError, match="does not match SHA256SUMS"):
        slurm_build.checked_tarball(V25, d)


def test_a_missing_tarball_says_where_it_is_looked_for(tmp_path: Path) -> None:
    with pytest.raises(DethpcError, match=r"third_party/slurm.*DETHPC_SLURM_SOURCE_DIR"):
        slurm_build.checked_tarball(V25, tmp_path)
    with pytest.raises(DethpcError, match="Debian's package"):
        slurm_build.checked_tarball(SlurmRelease.V22_05, tmp_path)


def test_the_vendored_tarball_is_the_listed_one() -> None:
    path, sha = slurm_build.checked_tarball(V25)
    assert path.parent.name == "slurm" and path.parent.parent.name == "third_party"
    assert sha == "f71f1e5f33a72e7864104a6857e86862eac3c4e5e348c92dd0c10dbe03a82dec"


def test_only_a_finished_build_of_the_same_tarball_is_reused(tmp_path: Path) -> None:
    sha = "cd" * 32
    assert slurm_build.read_stamp(tmp_path, sha) is None  # interrupted: no stamp
    (tmp_path / slurm_build.STAMP).write_text(json.dumps({"sha256": "ef" * 32}))
    assert slurm_build.read_stamp(tmp_path, sha) is None  # another tarball's
    (tmp_path / slurm_build.STAMP).write_text("{not json")
    assert slurm_build.read_stamp(tmp_path, sha) is None
    configure = slurm_build.configure_argv(tmp_path)[1:]
    (tmp_path / slurm_build.STAMP).write_text(json.dumps(
        {"sha256": sha, "configure": [*configure[:-1]]}))
    assert slurm_build.read_stamp(tmp_path, sha) is None  # configured otherwise
    done = {"sha256": sha, "version": "slurm 25.11.7", "configure": configure}
    (tmp_path / slurm_build.STAMP).write_text(json.dumps(done))
    assert slurm_build.read_stamp(tmp_path, sha) == done


def test_a_cached_build_is_found_through_the_release_link(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    d = _source(tmp_path)
    monkeypatch.setenv(slurm_build.SOURCE_DIR_ENV, str(d))
    shared = tmp_path / "shared"
    sha = hashlib.sha256(b"tarball bytes").hexdigest()
    prefix = slurm_build.build_prefix(shared, V25, sha)
    prefix.mkdir(parents=True)
    (prefix / slurm_build.STAMP).write_text(json.dumps(
        {"sha256": sha, "version": "slurm 25.11.7", "build_seconds": 237.0,
         "configure": slurm_build.configure_argv(prefix)[1:]}))
    build = slurm_build.ensure_slurm_build(V25, shared, install_deps=lambda _p: pytest.fail(
        "a cached build installs nothing"))
    assert (build.prefix, build.version, build.build_seconds, build.built_now) == (
        prefix, "slurm 25.11.7", 237.0, False)
    link = lanes.lane_layout(1, shared, V25).slurm_prefix
    assert link is not None and link.resolve() == prefix.resolve()


@pytest.mark.parametrize(("sums", "name", "want"), [
    ("aa  x.tar.xz\n", "x.tar.xz", "aa"),
    ("AA *x.tar.xz\n", "x.tar.xz", "aa"),  # binary-mode listing, upper case
    ("aa  y.tar.xz\n", "x.tar.xz", None),
    ("", "x.tar.xz", None),
])
def test_expected_sha256(sums: str, name: str, want: str | None) -> None:
    assert slurm_build.expected_sha256(sums, name) == want


def test_configure_installs_everything_under_the_prefix() -> None:
    argv = slurm_build.configure_argv(Path("/p/25.11-x"))
    assert argv[0] == "./configure" and "--prefix=/p/25.11-x" in argv
    assert "--sysconfdir=/p/25.11-x/etc" in argv
    assert "--enable-multiple-slurmd" in argv  # 4 slurmd on one host
