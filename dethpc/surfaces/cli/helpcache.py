"""``dethpc --help`` answered from a saved copy of its own output.

Owns: ``saved_help`` (the bytes the real CLI printed for ``dethpc --help`` under the
same key, or None) and ``recording`` (a context that captures what the real CLI
prints and saves it when it exits 0). The key holds everything the text depends on:
dethpc's version, the program's name, the CLI's source files (names, sizes, mtimes),
the Python and its installed packages (site-packages' mtimes), and what shapes rich's
rendering: which standard streams are terminals, the terminal's size, stdout's encoding
and every environment variable rich, typer or click read for it. A saved copy lives in
``$XDG_CACHE_HOME/dethpc/`` (default ``~/.cache/dethpc/``), the key in its first line;
a copy that cannot be read or written is simply not used.
Must not: import typer, rich, click or any of dethpc but its version: the point is
answering without them (typer and rich alone take ~0.14 s to import here, the whole
command tree ~0.6 s, against ~0.01 s for this module; bench/cli).
"""

from __future__ import annotations

import io
import os
import sys
import zlib

from dethpc.common.version import __version__

#: ``typing.TYPE_CHECKING`` without importing typing (nor contextlib: ``recording`` is a
#: class), which would be most of this path's imports
TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import TracebackType
    from typing import Any, TextIO

#: the one argv answered from the saved copy
HELP_ARGV = ["--help"]

#: environment variables that change what rich, typer or click print for help
RENDERING_ENV = (
    "COLUMNS", "LINES", "TERM", "COLORTERM", "NO_COLOR", "FORCE_COLOR", "PY_COLORS",
    "TTY_COMPATIBLE", "TTY_INTERACTIVE", "JUPYTER_COLUMNS", "JUPYTER_LINES",
    "DATABRICKS_RUNTIME_VERSION", "GITHUB_ACTIONS", "TERMINAL_WIDTH",
    "_TYPER_FORCE_DISABLE_TERMINAL", "TYPER_USE_RICH", "PYTHONIOENCODING", "LANG",
    "LC_ALL", "LC_CTYPE", "DETHPC_CLUSTER_CONFIG",
)
_CLI_DIR = os.path.dirname(os.path.abspath(__file__))


def _terminal_size() -> tuple[int, int] | None:
    """The size rich would find: the first standard stream that is a terminal."""
    for fd in (0, 1, 2):
        try:
            return tuple(os.get_terminal_size(fd))  # type: ignore[return-value]
        except (AttributeError, ValueError, OSError):
            continue
    return None


def cache_key() -> str:
    """One line that differs whenever the help text could."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    # the program name click prints ("dethpc", "python -m dethpc.surfaces.entry") comes
    # from argv[0] and __main__'s spec
    parts: list[Any] = [__version__, sys.version, sys.executable, sys.argv[0],
                        getattr(spec, "name", None)]
    for entry in sorted(os.scandir(_CLI_DIR), key=lambda e: e.name):
        if entry.name.endswith(".py"):
            st = entry.stat()
            parts.append((entry.name, st.st_size, st.st_mtime_ns))
    for path in sys.path:
        if path.endswith("-packages") and os.path.isdir(path):
            parts.append((path, os.stat(path).st_mtime_ns))
    parts.append(tuple(os.isatty(fd) for fd in (0, 1, 2)))
    parts.append(_terminal_size())
    parts.append(getattr(sys.stdout, "encoding", None))
    parts.append(tuple(os.environ.get(name) for name in RENDERING_ENV))
    return repr(parts).replace("\n", " ")


def _path(key: str) -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"),
                                                            ".cache")
    return os.path.join(base, "dethpc", f"help-{zlib.crc32(key.encode()):08x}.txt")


def saved_help(argv: list[str]) -> bytes | None:
    """The saved output for ``argv`` under the current key, or None."""
    if argv != HELP_ARGV:
        return None
    key = cache_key()
    try:
        with open(_path(key), "rb") as f:
            first = f.readline()
            if first != key.encode() + b"\n":
                return None
            return f.read()
    except OSError:
        return None


class _Tee(io.TextIOBase):
    """``sys.stdout`` as it was, plus a copy of every string written to it."""

    def __init__(self, inner: TextIO) -> None:
        self.inner = inner
        self.copy: list[str] = []

    def write(self, text: str) -> int:  # type: ignore[override]
        written = self.inner.write(text)  # click probes with bytes: the inner refuses
        self.copy.append(text)
        return written

    def flush(self) -> None:
        self.inner.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def isatty(self) -> bool:
        return self.inner.isatty()

    def fileno(self) -> int:
        return self.inner.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self.inner.encoding


class recording:  # noqa: N801 - used as a function: ``with recording(argv):``
    """Run the real CLI inside: for ``dethpc --help`` its stdout is copied and, when it
    exits 0, saved under the key it was printed with."""

    def __init__(self, argv: list[str]) -> None:
        self.on = argv == HELP_ARGV
        self.key = ""
        self.real: TextIO | None = None
        self.tee: _Tee | None = None

    def __enter__(self) -> None:
        if self.on:
            self.key = cache_key()
            self.real = sys.stdout
            self.tee = _Tee(self.real)
            sys.stdout = self.tee

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.real is None or self.tee is None:
            return
        sys.stdout = self.real
        if exc is None or (isinstance(exc, SystemExit) and exc.code in (0, None)):
            _save(self.key, "".join(self.tee.copy), self.real)


def _save(key: str, text: str, stream: TextIO) -> None:
    try:
        data = text.encode(getattr(stream, "encoding", None) or "utf-8")
    except UnicodeError:
        return
    save_keyed(_path(key), key, data)


def save_keyed(path: str, key: str, data: bytes) -> None:
    """Write ``key``'s line, then ``data``, to ``path`` whole or not at all (a temporary
    file renamed over it); a saved copy that cannot be written is simply not saved."""
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(tmp, "wb") as f:
            f.write(key.encode() + b"\n" + data)
        os.replace(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
