"""Dev-cluster profiles: the test lanes, and one large cluster for benchmarks at scale.

Owns: ``ClusterProfile`` (``lanes``: the 4-node clusters the test suite uses, as
``lanes`` numbers them; ``scale``: one cluster of many nodes with typed fake GPUs on
every node, for the peers-at-scale benchmark, issue 48), ``ScaleSpec`` (its shape: nodes,
GPUs per node and their type, CPU pinning), ``scale_layout`` (its names, ports and
directories, which no lane uses: a scale cluster never disturbs the lanes' tests) and the
record of the shape a scale cluster was brought up with (``save_spec``/``saved_spec``, a
small JSON file in its state directory, so that ``status`` and ``down`` know its nodes).

Scale cluster of Debian's 22.05 (``--slurm 25.11``: the second column)::

    state        <base>-scale                     <base>-slurm25.11-scale
    slurm.conf   /etc/slurm-scale/                /etc/slurm-25.11-scale/
    cluster      devscale                         s2511scale
    nodes        g1..gN                           sg1..sgN
    ports        ctld 6717, dbd 6719, 7201..      ctld 6727, dbd 6729, 7501..

Must not: start processes (``cluster`` does), or change what a lane is.
"""

from __future__ import annotations

import enum
import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from dethpc.devcluster.lanes import lane_layout
from dethpc.devcluster.layout import SLURM_ETC, DevClusterLayout, base_dir
from dethpc.devcluster.pinning import CpuPinning
from dethpc.devcluster.releases import DEFAULT_RELEASE, SlurmRelease
from dethpc.devcluster.site import GresSpec


class ClusterProfile(enum.Enum):
    """What ``python -m dethpc.devcluster --profile`` acts on."""

    LANES = "lanes"
    SCALE = "scale"


#: the scale cluster's user for fault injection: QoS ``normal``, no per-user limits
#: (the peers benchmark's preemptor submitted as dethpc-user and was refused, issue 48)
FAULT_USER = "dethpc-faults"
#: the users of the background trace (other people's jobs on the same GPUs)
BACKGROUND_USERS = ("dethpc-bg1", "dethpc-bg2", "dethpc-bg3")
#: the user the system under test runs as (its client commands, its login-side daemon
#: or driver, its jobs), so that sdiag's per-user RPC counts hold that system's alone
#: (root's hold slurmd's messages and the fault injector's admin commands)
SYSTEM_USER = "dethpc-bench"
#: ports: a node's port is FIRST_NODE_PORT + release offset + i (up to MAX_NODES)
FIRST_NODE_PORT = 7201
CTLD_PORT, DBD_PORT = 6717, 6719
MAX_NODES = 256
#: GPUs per node: a real node has at most 8 (also the fake device files per cluster)
MAX_GPUS_PER_NODE = 8
#: the file in the scale cluster's state directory that records its shape
SPEC_FILE = "scale.json"
#: per release (22.05 first): offsets of the ports, and the node name prefix
_RELEASE_PLACES = {SlurmRelease.V22_05: (0, 0, "g"), SlurmRelease.V25_11: (10, 300, "sg")}


@dataclass(frozen=True)
class ScaleSpec:
    """The shape of a scale cluster: 16 nodes of 4 ``a100`` fake GPUs (64) by default."""

    nodes: int = 16
    gpus_per_node: int = 4
    gpu_type: str = "a100"
    pinning: CpuPinning = field(default_factory=CpuPinning)

    def __post_init__(self) -> None:
        if not 1 <= self.nodes <= MAX_NODES:
            raise ValueError(f"scale nodes: {self.nodes} is not allowed; 1..{MAX_NODES}")
        if not 1 <= self.gpus_per_node <= MAX_GPUS_PER_NODE:
            raise ValueError(f"scale gpus_per_node: {self.gpus_per_node} is not allowed; "
                             f"1..{MAX_GPUS_PER_NODE}")
        if not self.gpu_type.isalnum():
            raise ValueError(f"scale gpu_type: {self.gpu_type!r} must be letters and digits "
                             "(it is a GRES type, e.g. a100)")

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node


def scale_layout(spec: ScaleSpec | None = None, base: Path | None = None,
                 release: SlurmRelease = DEFAULT_RELEASE) -> DevClusterLayout:
    """The layout of the scale cluster of ``release`` shaped as ``spec`` (``base``: the
    host's shared state directory, lane 1's)."""
    spec = spec or ScaleSpec()
    base = base or base_dir()
    first = lane_layout(1, base)
    port_step, node_step, prefix = _RELEASE_PLACES[release]
    default = release is DEFAULT_RELEASE
    short = release.value.replace(".", "")
    tag = "" if default else f"-slurm{release.value}"
    etc_tag = "" if default else f"-{release.value}"
    name_tag = "dev" if default else f"s{short}"
    db_tag = "" if default else f"_s{short}"
    nodes = tuple(f"{prefix}{i + 1}" for i in range(spec.nodes))
    site = replace(first.site,
                   gres=GresSpec(type=spec.gpu_type, count=spec.gpus_per_node, nodes=nodes),
                   unlimited_users=(FAULT_USER, *BACKGROUND_USERS, SYSTEM_USER))
    return replace(first, state_dir=Path(f"{base}{tag}-scale"), shared_dir=base,
                   cluster_name=f"{name_tag}scale", node_prefix=prefix, node_count=spec.nodes,
                   first_node_port=FIRST_NODE_PORT + node_step,
                   ctld_port=CTLD_PORT + port_step, dbd_port=DBD_PORT + port_step,
                   db_name=f"{first.db_name}{db_tag}_scale",
                   slurm_etc=Path(f"{SLURM_ETC}{etc_tag}-scale"), site=site, release=release,
                   pinning=spec.pinning)


def scale_state_dir(base: Path | None = None,
                    release: SlurmRelease = DEFAULT_RELEASE) -> Path:
    """The scale cluster's state directory (whatever its shape)."""
    return scale_layout(ScaleSpec(nodes=1), base, release).state_dir


def save_spec(layout: DevClusterLayout, spec: ScaleSpec) -> None:
    """Record ``spec`` in the scale cluster's state directory (``up`` does)."""
    layout.state_dir.mkdir(parents=True, exist_ok=True)
    (layout.state_dir / SPEC_FILE).write_text(json.dumps(asdict(spec), indent=1) + "\n")


def saved_spec(base: Path | None = None,
               release: SlurmRelease = DEFAULT_RELEASE) -> ScaleSpec | None:
    """The shape the scale cluster of ``release`` was last brought up with, or None."""
    path = scale_state_dir(base, release) / SPEC_FILE
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    pins = raw.get("pinning") or {}
    pinning = CpuPinning(**{k: None if v is None else tuple(v) for k, v in pins.items()})
    return ScaleSpec(nodes=int(raw["nodes"]), gpus_per_node=int(raw["gpus_per_node"]),
                     gpu_type=str(raw["gpu_type"]), pinning=pinning)
