"""Snapshot of a model directory into the experiment's run directory.

Owns: walking the model directory with ``.detignore`` (gitignore syntax via
pathspec), skipping ``__pycache__``/``*.pyc``, enforcing the size limit (error
lists the largest files) and copying.
Must not: know the run-directory layout (the caller passes the destination).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pathspec

from dethpc.common.errors import ContextError

DEFAULT_LIMIT_BYTES = 95 * 1024 * 1024
ALWAYS_IGNORED = ("__pycache__/", "*.pyc", ".git/", ".detignore.swp")


@dataclass(frozen=True)
class ContextFile:
    rel: str
    size: int


def list_context(src: Path) -> list[ContextFile]:
    """Files of ``src`` that belong in the snapshot, sorted by relative path."""
    src = Path(src)
    if not src.is_dir():
        raise ContextError(f"model directory {src} does not exist or is not a directory")
    patterns = list(ALWAYS_IGNORED)
    ignore_file = src / ".detignore"
    if ignore_file.is_file():
        patterns += ignore_file.read_text().splitlines()
    spec = pathspec.PathSpec.from_lines("gitignore", patterns)
    out: list[ContextFile] = []
    for dirpath, dirnames, filenames in os.walk(src):
        rel_dir = os.path.relpath(dirpath, src)
        rel_dir = "" if rel_dir == "." else rel_dir + "/"
        dirnames[:] = sorted(d for d in dirnames if not spec.match_file(rel_dir + d + "/"))
        for name in sorted(filenames):
            rel = rel_dir + name
            path = Path(dirpath) / name
            if spec.match_file(rel) or not path.is_file():
                continue
            out.append(ContextFile(rel, path.stat().st_size))
    return sorted(out, key=lambda f: f.rel)


def check_size(files: list[ContextFile], limit: int = DEFAULT_LIMIT_BYTES) -> int:
    total = sum(f.size for f in files)
    if total > limit:
        largest = sorted(files, key=lambda f: f.size, reverse=True)[:5]
        listing = "\n".join(f"    {f.size / 2**20:8.1f} MiB  {f.rel}" for f in largest)
        raise ContextError(
            f"model directory is {total / 2**20:.1f} MiB, over the {limit / 2**20:.0f} MiB "
            f"limit. Largest files:\n{listing}\nAdd data and outputs to .detignore, or keep "
            "large data on shared storage and read it from there (bind_mounts / data).")
    return total


def snapshot_context(src: Path, dest: Path, limit: int = DEFAULT_LIMIT_BYTES) -> int:
    """Copy the model directory to ``dest`` (which must not exist); returns bytes copied."""
    files = list_context(src)
    total = check_size(files, limit)
    tmp = dest.with_name(dest.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    for f in files:
        target = tmp / f.rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(Path(src) / f.rel, target)
    tmp.mkdir(parents=True, exist_ok=True)
    tmp.rename(dest)
    return total
