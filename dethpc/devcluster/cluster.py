"""Bring a single-host Slurm cluster up, down, and report on it; and all lanes at once.

Owns: ``DevCluster`` -- one cluster (one lane, ``lanes``) put together from its parts:
``up`` (host set-up, shared munged and MariaDB, the cluster's configs, its slurmdbd ->
slurmctld -> 4 x slurmd, the wait for usable nodes, the accounting records), ``down``
(stops only what ``up`` started for this cluster) and ``status``; the order of those
steps, the locks (the cluster's own, and the shared one for what every lane shares)
and ``Timings``. Also ``up_lanes``/``down_lanes``, the same over every lane of the host
(``down_lanes`` of everything stops a scale cluster first: it shares MariaDB and munged),
and ``down_scale`` (``profiles``' scale cluster).
Every step is idempotent: ``up`` on a running cluster returns in well under a second,
on a partial one it repairs what is missing.
Must not: print (it reports through the ``say`` callback), hold the steps themselves
(``host``, ``configs``, ``shared``, ``daemons``, ``readiness``, ``accounting`` do), or be
imported by library code that runs on a real site.

The measured facts this builds on are in docs/dev-cluster.md.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from dethpc.common.flock import flocked
from dethpc.common.runner import CommandRunner
from dethpc.devcluster.accounting import Accounting
from dethpc.devcluster.configs import ConfigFiles
from dethpc.devcluster.daemons import SlurmDaemons
from dethpc.devcluster.host import HostSetup
from dethpc.devcluster.lanes import current_layout, existing_lanes, lane_env, lane_layout
from dethpc.devcluster.layout import OWNER_ENV, DevClusterLayout
from dethpc.devcluster.profiles import saved_spec, scale_layout, scale_state_dir
from dethpc.devcluster.readiness import (
    RESUMABLE_STATES,
    USABLE_STATES,
    ClusterStatus,
    DaemonState,
    Readiness,
)
from dethpc.devcluster.releases import DEFAULT_RELEASE, SlurmRelease
from dethpc.devcluster.shared import SharedServices
from dethpc.devcluster.site import AccountingState

__all__ = ["RESUMABLE_STATES", "USABLE_STATES", "ClusterStatus", "DaemonState", "DevCluster",
           "Timings", "down_lanes", "down_scale", "up_lanes"]


@dataclass
class Timings:
    steps: list[tuple[str, float]] = field(default_factory=list)
    start: float = field(default_factory=time.monotonic)
    #: when ``up`` returned (None while it runs)
    end: float | None = None

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        t0 = time.monotonic()
        try:
            yield
        finally:
            self.steps.append((name, time.monotonic() - t0))

    @property
    def total(self) -> float:
        return (self.end or time.monotonic()) - self.start

    def summary(self) -> str:
        parts = [f"{n} {s:.1f}s" for n, s in self.steps if s >= 0.05]
        return f"total {self.total:.1f}s" + (f" ({', '.join(parts)})" if parts else "")


class DevCluster:
    """One dev cluster, described by ``layout`` (default: this process's lane,
    ``$DETHPC_DEVCLUSTER_LANE``); its commands run through ``runner``, whose environment
    names the cluster's ``SLURM_CONF``."""

    def __init__(
        self,
        layout: DevClusterLayout | None = None,
        runner: CommandRunner | None = None,
        say: Callable[[str], None] = lambda _msg: None,
    ) -> None:
        self.layout = layout or current_layout()
        env = {**os.environ, **lane_env(self.layout)}
        self.runner = runner or CommandRunner(timeout=60.0, retries=0, env=env)
        self.say = say
        #: Runs the daemons that fork themselves: they (and slurmstepd) carry the marker.
        self.daemon_runner = CommandRunner(timeout=60.0, retries=0, env={
            **env, OWNER_ENV: self.layout.owner_marker})
        self.host = HostSetup(self.layout, self.runner, say)
        self.configs = ConfigFiles(self.layout)
        self.shared = SharedServices(self.layout, self.runner)
        self.daemons = SlurmDaemons(self.layout, self.runner, self.daemon_runner)
        self.readiness = Readiness(self.layout, self.runner)
        self.accounting = Accounting(self.layout, self.runner)

    # ------------------------------------------------------------------ checks
    preflight = staticmethod(HostSetup.preflight)

    def munge_ok(self) -> bool:
        return self.readiness.munge_ok()

    def controller_up(self) -> bool:
        return self.readiness.controller_up()

    def node_states(self) -> dict[str, str]:
        """``{node: state}`` from sinfo (``idle``, ``down*``, ``drained`` ...)."""
        return self.readiness.node_states()

    def status(self) -> ClusterStatus:
        return self.readiness.status()

    def accounting_state(self) -> AccountingState:
        return self.accounting.state()

    def apply_accounting(self, members: Sequence[str], test_user: str | None = None) -> None:
        """Run the ``sacctmgr`` commands ``plan_accounting`` asks for (none when current)."""
        self.accounting.apply(members, test_user)

    # ---------------------------------------------------------------------- up
    def up(self, *, force: bool = False, users: Sequence[str] = (),
           wait_timeout: float = 120.0) -> Timings:
        """Start (or repair) the cluster and wait until every node is usable."""
        self.preflight()
        timings = Timings()
        self.layout.state_dir.mkdir(parents=True, exist_ok=True)
        self.layout.shared.mkdir(parents=True, exist_ok=True)
        with self.locked():
            with timings.step("check"):
                repin = self.daemons.pinning_differs()
                if self.status().ready and not self.configs.stale() \
                        and self.host.gpu_devices_ok() and not repin \
                        and not self.daemons.ctld_on_other_config():
                    self.accounting.ensure_accounts(users)
                    self.say(f"dev cluster {self.name} already up")
                    return timings
            password = self._up_shared(timings)
            with timings.step("files"):
                self.host.ensure_gpu_devices()
                changed = self.configs.write(password, force)
            with timings.step("slurmdbd"):
                self.daemons.ensure_slurmdbd(
                    restart=repin or self.layout.slurmdbd_conf in changed)
                self.accounting.ensure_cluster_record()
            with timings.step("slurmctld"):
                started = self.daemons.ensure_slurm(restart=repin or bool(
                    {self.layout.slurm_conf, self.layout.gres_conf} & changed))
            with timings.step("nodes"):
                self.readiness.wait_nodes(wait_timeout, started)
            with timings.step("accounts"):
                self.host.ensure_users(self.layout.site.unlimited_users)
                self.accounting.ensure_accounts(users)
        site = self.layout.site
        self.say(f"dev cluster {self.name} up: {self.layout.node_count} nodes "
                 f"{self.layout.nodelist}, partitions debug/low/high, "
                 f"gres {site.gres.node_gres} on {','.join(site.gres.nodes)}, QoS "
                 f"{'/'.join(q.name for q in site.qos)}, accounts "
                 f"{'/'.join(a.name for a in site.accounts)}")
        return timings

    def _up_shared(self, timings: Timings) -> str:
        """Packages, directories, /etc/hosts, munge key, munged, MariaDB and this
        cluster's database (under the shared lock); the database password."""
        with self.shared_locked():
            with timings.step("packages"):
                self.host.ensure_packages()
            if self.layout.release.built:
                with timings.step(f"slurm {self.layout.release.value} build"):
                    from dethpc.devcluster.slurm_build import ensure_slurm_build
                    ensure_slurm_build(self.layout.release, self.layout.shared, say=self.say,
                                       install_deps=self.host.ensure_packages)
            with timings.step("host"):
                self.host.ensure_dirs()
                self.host.ensure_hosts()
                self.host.ensure_munge_key()
                password = self.configs.db_password()
            with timings.step("munged"):
                self.shared.ensure_munged()
            with timings.step("mariadb"):
                self.shared.ensure_mariadb()
                self.shared.ensure_database(password)
        return password

    @property
    def name(self) -> str:
        lay = self.layout
        return f"{lay.cluster_name} (Slurm {lay.release.value}, lane {lay.lane})"

    # -------------------------------------------------------------------- down
    def down(self, *, shared: bool = False) -> list[str]:
        """Stop what ``up`` started for this cluster (and nothing else); with ``shared``
        also MariaDB and munged, which every lane uses: only when no other lane runs.
        Returns what was stopped."""
        self.preflight()
        if not self.layout.state_dir.exists():
            return []
        stopped: list[str] = []
        with self.locked():
            stopped += self.daemons.requeue_running()
            stopped += self.daemons.stop_slurm()
            stopped += self.daemons.stop_slurmdbd()
            stopped += self.daemons.sweep_leftovers()
        if shared:
            with self.shared_locked():
                stopped += self.shared.stop()
        return stopped

    # ----------------------------------------------------------------- helpers
    def locked(self) -> AbstractContextManager[None]:
        """This cluster's lock: ``up``, ``down`` and ``devcluster.faults`` hold it."""
        return _flocked(self.layout.lock_file)

    def shared_locked(self) -> AbstractContextManager[None]:
        """The lock of what every lane shares (packages, /etc/hosts, munged, MariaDB)."""
        return _flocked(self.layout.shared_lock_file)


@contextmanager
def _flocked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with flocked(path):
        yield


# ------------------------------------------------------------------ all lanes
def up_lanes(lanes: Sequence[int], *, force: bool = False, users: Sequence[str] = (),
             say: Callable[[str], None] = lambda _msg: None,
             release: SlurmRelease = DEFAULT_RELEASE) -> list[tuple[DevCluster, Timings]]:
    """``up`` of each lane of ``release`` in turn (lane 1 first: it installs what all of
    them share)."""
    out = []
    for lane in sorted(lanes):
        cluster = DevCluster(lane_layout(lane, release=release), say=say)
        timings = cluster.up(force=force, users=users)
        timings.end = timings.end or time.monotonic()
        out.append((cluster, timings))
    return out


def down_lanes(lanes: Sequence[int] | None = None,
               say: Callable[[str], None] = lambda _msg: None,
               release: SlurmRelease | None = None) -> list[str]:
    """``down`` of ``lanes`` of ``release`` (None: every lane of every release whose
    state directory exists, then the shared MariaDB and munged)."""
    if lanes is not None:
        chosen = [(release or DEFAULT_RELEASE, lane) for lane in sorted(lanes)]
    else:
        chosen = [(r, lane) for r in SlurmRelease if release in (None, r)
                  for lane in existing_lanes(release=r)]
    every = lanes is None and release is None
    stopped: list[str] = []
    if every:  # a scale cluster uses the shared MariaDB and munged too: stop it first
        stopped += down_scale(None, say=say)
    # the default release's lowest lane last: it also stops what every cluster shares
    ordered = sorted(chosen, key=lambda c: (c[0] is DEFAULT_RELEASE, -c[1]))
    for i, (r, lane) in enumerate(ordered):
        cluster = DevCluster(lane_layout(lane, release=r), say=say)
        last = every and i == len(ordered) - 1
        where = f"lane {lane}" if r is DEFAULT_RELEASE else f"Slurm {r.value} lane {lane}"
        stopped += [f"{name} [{where}]" for name in cluster.down(shared=last)]
    return stopped


def down_scale(release: SlurmRelease | None,
               say: Callable[[str], None] = lambda _msg: None) -> list[str]:
    """``down`` of the scale cluster of ``release`` (None: of every release) whose state
    directory exists, in the shape it was brought up with (``profiles.saved_spec``)."""
    stopped: list[str] = []
    for r in SlurmRelease:
        if release not in (None, r) or not scale_state_dir(release=r).is_dir():
            continue
        cluster = DevCluster(scale_layout(saved_spec(release=r), release=r), say=say)
        stopped += [f"{name} [scale, Slurm {r.value}]" for name in cluster.down()]
    return stopped
