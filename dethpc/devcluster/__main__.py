"""``python -m dethpc.devcluster up|down|status``: works without the CLI installed.

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
    args = parser.parse_args(argv)
    if args.command == "up":
        return commands.up(force=args.force, users=args.user)
    if args.command == "down":
        return commands.down()
    return commands.status()


if __name__ == "__main__":
    sys.exit(main())
