#!/usr/bin/env python3
"""Print, check or rewrite the generated section of docs/job-environment.md.

Owns: nothing but the writing; the section is ``dethpc.common.jobenv.doc_section()``,
rendered from the environment table (``dethpc.common.jobenv.TABLE``)::

    python scripts/job_environment.py           # print the section
    python scripts/job_environment.py --write   # rewrite it in docs/job-environment.md
    python scripts/job_environment.py --check   # exit 1 when the doc is stale

Must not: be imported by dethpc (a maintainer's tool; the unit test compares the doc with
``doc_section()`` itself).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "job-environment.md"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite the doc's section")
    mode.add_argument("--check", action="store_true", help="exit 1 when the doc is stale")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO))
    from dethpc.common.jobenv import DOC_BEGIN, DOC_END, doc_section

    section = doc_section()
    if not (args.write or args.check):
        sys.stdout.write(section)
        return 0
    text = DOC.read_text(encoding="utf-8")
    if DOC_BEGIN not in text or DOC_END not in text:
        raise SystemExit(f"{DOC}: no generated section ({DOC_BEGIN} ... {DOC_END})")
    head, rest = text.split(DOC_BEGIN, 1)
    tail = rest.split(DOC_END, 1)[1].lstrip("\n")
    new = head + section + ("\n" + tail if tail else "")
    if args.check:
        print(f"{DOC}: {'up to date' if new == text else 'stale'}")
        return 0 if new == text else 1
    DOC.write_text(new, encoding="utf-8")
    print(f"wrote the generated section of {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
