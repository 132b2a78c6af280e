"""Model-directory snapshots: .detignore, caches skipped, the size limit's error."""

import pytest

from dethpc.common.errors import ContextError
from dethpc.control.snapshot import list_context, snapshot_context


def make_tree(root, files):
    for rel, size in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"x" * size)


@pytest.mark.parametrize("detignore,expected", [
    ("", ["a.py", "data/big.bin", "data/small.csv", "sub/b.py"]),
    ("data/\n", ["a.py", "sub/b.py"]),
    ("*.bin\n", ["a.py", "data/small.csv", "sub/b.py"]),
    ("data/*\n!data/small.csv\n", ["a.py", "data/small.csv", "sub/b.py"]),
    ("# comment\nsub\n", ["a.py", "data/big.bin", "data/small.csv"]),
])
def test_detignore(tmp_path, detignore, expected):
    make_tree(tmp_path, {"a.py": 1, "sub/b.py": 1, "data/big.bin": 10, "data/small.csv": 2,
                         "__pycache__/a.cpython-311.pyc": 3, "sub/c.pyc": 1})
    if detignore:
        (tmp_path / ".detignore").write_text(detignore)
    got = [f.rel for f in list_context(tmp_path) if f.rel != ".detignore"]
    assert got == expected


def test_snapshot_copies_and_refuses_oversize_listing_largest(tmp_path):
    src = tmp_path / "src"
    make_tree(src, {"model.py": 10, "weights.pt": 3000, "data/train.npy": 2000})
    dest = tmp_path / "snap"
    assert snapshot_context(src, dest, limit=10_000) == 5010
    assert (dest / "data" / "train.npy").stat().st_size == 2000
    with pytest.raises(ContextError) as err:
        snapshot_context(src, tmp_path / "snap2", limit=4000)
    msg = str(err.value)
    assert "over the" in msg and "weights.pt" in msg and "data/train.npy" in msg
    assert msg.index("weights.pt") < msg.index("data/train.npy")  # largest first
    assert not (tmp_path / "snap2").exists()


def test_missing_model_dir_is_a_clear_error(tmp_path):
    with pytest.raises(ContextError, match="does not exist"):
        list_context(tmp_path / "nope")
