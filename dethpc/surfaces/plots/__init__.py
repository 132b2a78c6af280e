"""``dethpc experiment plot``: one experiment drawn to a PNG or SVG file.

Owns: ``write_plot`` (check the output path, gather, draw, save) and the plain errors
of the command: an unsupported suffix, a missing directory, matplotlib not installed
(the ``plots`` extra). ``dethpc.surfaces.plots.data`` gathers from the store (no matplotlib);
``dethpc.surfaces.plots.draw`` draws (matplotlib, imported only here, only when drawing).
Must not: write to the store.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dethpc.common.errors import DethpcError
from dethpc.store import Store

#: the output formats, by suffix
SUFFIXES = (".png", ".svg")
INSTALL_HINT = ("matplotlib is not installed; `dethpc experiment plot` needs the plots "
                "extra: pip install 'dethpc[plots]' (or: pip install 'matplotlib>=3.7')")


@dataclass(frozen=True)
class Written:
    path: Path
    trials: int
    curves: int
    brackets: int
    hparams: int


def check_output(path: Path) -> None:
    """A ``DethpcError`` naming ``--output`` for a suffix other than .png/.svg or a
    directory that does not exist."""
    if path.suffix.lower() not in SUFFIXES:
        raise DethpcError(f"--output: unsupported file type {path.suffix or '(none)'!r} in "
                          f"{str(path)!r}; allowed: {', '.join(SUFFIXES)}")
    if not path.parent.is_dir():
        raise DethpcError(f"--output: directory {str(path.parent)!r} does not exist")


def write_plot(store: Store, exp_id: int, path: Path) -> Written:
    """Draw experiment ``exp_id`` into ``path`` (.png or .svg)."""
    from dethpc.surfaces.plots.data import gather

    check_output(path)
    data = gather(store, exp_id)
    try:
        from dethpc.surfaces.plots import draw
    except ImportError as exc:
        if (exc.name or "").split(".")[0] != "matplotlib":
            raise
        raise DethpcError(INSTALL_HINT) from None
    draw.save(draw.figure(data), path)
    return Written(path, len(data.trials), len(data.curves), len(data.brackets),
                   len(data.axes))
