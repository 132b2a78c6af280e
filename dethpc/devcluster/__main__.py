"""``python -m dethpc.devcluster up|down|status|image``: works without the CLI installed.

Owns: argument parsing for the module entry point only.
"""

from __future__ import annotations

import argparse
import sys

from dethpc.devcluster import commands


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
    sub.add_parser("down", help="stop the daemons that `up` started")
    sub.add_parser("status", help="show the daemons and sinfo; exit 0 when up")
    p_image = sub.add_parser("image", help="build (once) the Charliecloud image of dethpc + "
                             "torch under the state directory; print path, size, build time")
    p_image.add_argument("--rebuild", action="store_true", help="build even when up to date")
    args = parser.parse_args(argv)
    if args.command == "image":
        return _image(rebuild=args.rebuild)
    if args.command == "up":
        return commands.up(force=args.force, users=args.user)
    if args.command == "down":
        return commands.down()
    return commands.status()


def _image(*, rebuild: bool) -> int:
    from dethpc.common.errors import CommandError
    from dethpc.devcluster.image import ImageError, ensure_image

    try:
        info = ensure_image(rebuild=rebuild)
    except (ImageError, CommandError) as exc:
        print(f"image: {exc}", file=sys.stderr)
        return 1
    how = "built" if info.built else "up to date, built"
    print(f"{info.path}\n  size {info.size_mb} MB, {how} in {info.build_seconds:.1f} s; "
          f"python {info.python} (torch {info.torch_version})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
