"""``python -m dethpc.devcluster up|down|status|image|pyslurm``: works without the CLI installed.

``up``/``status`` act on every lane (``--lanes N``, default 3) unless one is named
(``--lane K`` or ``$DETHPC_DEVCLUSTER_LANE``); see ``dethpc.devcluster.lanes``.
``--profile scale`` acts on the one large cluster instead (``--nodes``,
``--gpus-per-node``, ``--gpu-type``, ``--login-cpus``, ``--node-cpus`` for ``up``); see
``dethpc.devcluster.profiles``.

Owns: argument parsing for the module entry point only.
Must not: act on the cluster itself (``commands`` does).
"""

from __future__ import annotations

import argparse
import sys

from dethpc.devcluster import commands
from dethpc.devcluster.lanes import DEFAULT_LANES
from dethpc.devcluster.pinning import CpuPinning, parse_cpus
from dethpc.devcluster.profiles import ClusterProfile, ScaleSpec
from dethpc.devcluster.releases import SlurmRelease


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m dethpc.devcluster",
        description="A real single-host Slurm cluster for dethpc development and CI.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p_up = sub.add_parser("up", help="install, start or repair the cluster (root, Debian)")
    p_up.add_argument("--force", action="store_true",
                      help="overwrite an /etc/slurm config that the dev cluster did not write")
    p_up.add_argument("--user", action="append", default=[],
                      help="also add this user to the accounting records (repeatable)")
    p_down = sub.add_parser("down", help="stop the daemons that `up` started (every lane "
                            "and the shared MariaDB/munged, or only --lane K's Slurm daemons)")
    p_status = sub.add_parser("status", help="show the daemons and sinfo; exit 0 when up")
    for p in (p_up, p_down, p_status):
        p.add_argument("--lane", type=int, default=None,
                       help="only this lane's cluster (default: $DETHPC_DEVCLUSTER_LANE, "
                       "else every lane)")
    for p in (p_up, p_down, p_status):
        p.add_argument("--slurm", default=None, choices=[r.value for r in SlurmRelease],
                       help="the Slurm release of the cluster(s): 22.05 is Debian's; 25.11 "
                       "is built once per machine from third_party/slurm (default: "
                       "$DETHPC_DEVCLUSTER_SLURM, else 22.05; `down` without it: every "
                       "release)")
    for p in (p_up, p_status):
        p.add_argument("--lanes", type=int, default=None,
                       help="how many lanes (clusters) when no lane is named (default: "
                       f"$DETHPC_DEVCLUSTER_LANES, else {DEFAULT_LANES})")
    for p in (p_up, p_down, p_status):
        p.add_argument("--profile", default=ClusterProfile.LANES.value,
                       choices=[c.value for c in ClusterProfile],
                       help="lanes: the test suite's 4-node clusters (default); scale: one "
                       "large cluster with fake GPUs on every node, its own names, ports "
                       "and directories (benchmarks; docs/dev-cluster.md)")
    scale = ScaleSpec()
    p_up.add_argument("--nodes", type=int, default=scale.nodes,
                      help=f"scale: nodes (default {scale.nodes})")
    p_up.add_argument("--gpus-per-node", type=int, default=scale.gpus_per_node,
                      help=f"scale: fake GPUs per node (default {scale.gpus_per_node})")
    p_up.add_argument("--gpu-type", default=scale.gpu_type,
                      help=f"scale: the GPUs' GRES type (default {scale.gpu_type})")
    p_up.add_argument("--login-cpus", default=None,
                      help="scale: pin slurmctld and slurmdbd to these CPUs (taskset list, "
                      "e.g. 0); default: not pinned")
    p_up.add_argument("--node-cpus", default=None,
                      help="scale: pin every slurmd, and so its jobs, to these CPUs (e.g. 1); "
                      "default: not pinned")
    p_image = sub.add_parser("image", help="build (once) the Charliecloud image of dethpc + "
                             "torch under the state directory; print path, size, build time")
    p_image.add_argument("--rebuild", action="store_true", help="build even when up to date")
    p_pyslurm = sub.add_parser("pyslurm", help="build (once) pyslurm against a built Slurm "
                               "release and print the wheel's path (a test-only step)")
    p_pyslurm.add_argument("--slurm", default="25.11",
                           choices=[r.value for r in SlurmRelease if r.traits.pyslurm],
                           help="the release whose headers and libslurm it is built against")
    args = parser.parse_args(argv)
    if args.command == "pyslurm":
        return commands.pyslurm_wheel(slurm=args.slurm)
    if args.command == "image":
        return _image(rebuild=args.rebuild)
    if args.profile == ClusterProfile.SCALE.value:
        return _scale(args)
    if args.command == "up":
        return commands.up(force=args.force, users=args.user, lane=args.lane, lanes=args.lanes,
                           slurm=args.slurm)
    if args.command == "down":
        return commands.down(lane=args.lane, slurm=args.slurm)
    return commands.status(lane=args.lane, lanes=args.lanes, slurm=args.slurm)


def _scale(args: argparse.Namespace) -> int:
    if args.command == "down":
        return commands.down_scale_cluster(slurm=args.slurm)
    if args.command == "status":
        return commands.status_scale(slurm=args.slurm)
    try:
        pinning = CpuPinning(
            login=parse_cpus(args.login_cpus) if args.login_cpus else None,
            nodes=parse_cpus(args.node_cpus) if args.node_cpus else None)
        spec = ScaleSpec(nodes=args.nodes, gpus_per_node=args.gpus_per_node,
                         gpu_type=args.gpu_type, pinning=pinning)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return commands.up_scale(spec, force=args.force, users=args.user, slurm=args.slurm)


def _image(*, rebuild: bool) -> int:
    from dethpc.common.errors import CommandError
    from dethpc.devcluster.image import ImageError, ImagePlan, ensure_image

    try:
        info = ensure_image(rebuild=rebuild)
    except (ImageError, CommandError) as exc:
        print(f"image: {exc}", file=sys.stderr)
        return 1
    how = {ImagePlan.BUILD: "built", ImagePlan.REUSE: "up to date, built",
           ImagePlan.REFRESH: "refreshed (dethpc's wheel only)"}[info.plan]
    print(f"{info.path}\n  size {info.size_mb} MB, {how} in {info.build_seconds:.1f} s; "
          f"python {info.python} (torch {info.torch_version})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
