"""``dethpc.surfaces.cli.helpcache``: the saved ``dethpc --help`` is used only under the
key it was printed with (tests/local/test_cli_startup.py runs the real entry)."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from dethpc.surfaces.cli import helpcache


@pytest.fixture(autouse=True)
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    for name in helpcache.RENDERING_ENV:
        monkeypatch.delenv(name, raising=False)
    return tmp_path


@pytest.mark.parametrize("name", helpcache.RENDERING_ENV)
def test_every_variable_that_shapes_the_text_is_in_the_key(
        name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    before = helpcache.cache_key()
    monkeypatch.setenv(name, "1")
    assert helpcache.cache_key() != before


def test_a_cli_source_change_is_a_new_key(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    cli = tmp_path / "cli"
    cli.mkdir()
    (cli / "main.py").write_text("app = 1\n")
    monkeypatch.setattr(helpcache, "_CLI_DIR", str(cli))
    before = helpcache.cache_key()
    (cli / "main.py").write_text("app = 22\n")
    assert helpcache.cache_key() != before


def print_help(monkeypatch: pytest.MonkeyPatch, text: str, code: int = 0) -> str:
    """What ``recording`` saw the CLI print (the CLI replaced by a print), on a stdout
    that stays for the rest of the test (its encoding is part of the key)."""
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    with pytest.raises(SystemExit), helpcache.recording(["--help"]):
        print(text, end="")
        raise SystemExit(code)
    assert sys.stdout is out
    return out.getvalue()


def test_what_the_cli_printed_is_answered_under_the_same_key(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert helpcache.saved_help(["--help"]) is None
    assert print_help(monkeypatch, "Usage: dethpc ✓\n") == "Usage: dethpc ✓\n"
    assert helpcache.saved_help(["--help"]) == "Usage: dethpc ✓\n".encode()
    assert helpcache.saved_help(["--help", "x"]) is None
    monkeypatch.setenv("COLUMNS", "61")
    assert helpcache.saved_help(["--help"]) is None


def test_a_failed_call_is_not_saved(monkeypatch: pytest.MonkeyPatch) -> None:
    print_help(monkeypatch, "half a help", code=1)
    assert helpcache.saved_help(["--help"]) is None


def test_a_copy_under_another_key_is_not_used(cache_home: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    print_help(monkeypatch, "text\n")
    [saved] = (cache_home / "dethpc").iterdir()
    saved.write_bytes(b"another key\ntext\n")
    assert helpcache.saved_help(["--help"]) is None
