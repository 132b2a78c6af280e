"""Issue 47 item 6: YAML that would cost the login node is refused at parse.

Every reader of user YAML (experiment configs, search/task files, cluster configs,
``--config`` values) and the daemon's re-read of a stored config go through
``dethpc.config._yaml``; a document over a bound of ``dethpc.config._yaml_limits`` is a
``ConfigError`` that names the file, the bound and the docs section, before anything
walks the expanded document. Ordinary anchors and merge keys keep working. (Time and
memory of a refusal are measured by bench/yaml_limits, not asserted here.)
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dethpc.common.errors import ConfigError
from dethpc.config import apply_overrides, dump_config, load_experiment_config, parse_stored
from dethpc.config._yaml import load_yaml_file, load_yaml_text
from dethpc.config._yaml_limits import DOCS, USER_LIMITS

HEAD = "name: t\nentrypoint: python3 train.py\nsearcher: {name: single, metric: loss}\n"


def laughs(levels: int, width: int, *, kind: str = "seq") -> str:
    """``levels`` anchors, each ``width`` aliases of the one before ("billion laughs")."""
    lines = ["data:", "  l0: &l0 lol"]
    for i in range(1, levels + 1):
        refs = [f"*l{i - 1}"] * width
        body = {"seq": "[" + ", ".join(refs) + "]",
                "map": "{" + ", ".join(f"k{j}: {r}" for j, r in enumerate(refs)) + "}",
                }[kind]
        lines.append(f"  l{i}: &l{i} {body}")
    return HEAD + "\n".join(lines) + "\n"


def merge_bomb(levels: int, width: int) -> str:
    """Merge keys: each mapping merges ``width`` copies of the one before."""
    lines = ["data:", "  m0: &m0 {a: lol, b: lol, c: lol}"]
    for i in range(1, levels + 1):
        lines.append(f"  m{i}: &m{i} {{<<: [" + ", ".join([f"*m{i - 1}"] * width)
                     + f"], own{i}: x}}")
    return HEAD + "\n".join(lines) + "\n"


def nested_aliases(links: int, deep: int) -> str:
    """Each anchor holds the one before ``deep`` levels down: small text, deep once
    written out."""
    lines = ["data:", "  n0: &n0 x"]
    for i in range(1, links + 1):
        lines.append(f"  n{i}: &n{i} " + "[" * deep + f"*n{i - 1}" + "]" * deep)
    return HEAD + "\n".join(lines) + "\n"


BIG = "x" * 100_000
REFUSED = [
    ("billion laughs, sequences (8 levels of 9)", laughs(8, 9), "would expand"),
    ("billion laughs, mappings", laughs(8, 9, kind="map"), "would expand"),
    ("merge keys (<<) multiplying", merge_bomb(8, 9), "would expand"),
    ("a long scalar aliased 30 times",
     HEAD + f"data:\n  s: &s {BIG}\n  l: [" + ", ".join(["*s"] * 30) + "]\n",
     "would expand"),
    ("more aliases than allowed", HEAD + "data:\n  x: &x 1\n  l: ["
     + ", ".join(["*x"] * 101) + "]\n", "more than 100 aliases"),
    ("nested flow collections 10,000 deep", HEAD + "data: " + "[" * 10_000
     + "]" * 10_000 + "\n", "nested more than 100 levels"),
    ("nested block mappings 150 deep", HEAD + "data:\n" + "".join(
        "  " * (i + 1) + f"k{i}:\n" for i in range(150)), "nested more than 100 levels"),
    ("deep only once aliases are written out", nested_aliases(4, 40),
     "nested more than 100 levels"),
    ("a sequence that contains itself", HEAD + "data: &a [1, *a]\n", "contains it"),
    ("a mapping that contains itself", HEAD + "data: &a {k: *a}\n", "contains it"),
    ("a mapping that merges itself", HEAD + "data: &a {<<: *a}\n", "contains it"),
    ("a scalar over the text bound", HEAD + "data: " + "y" * (256 << 10) + "\n",
     "characters of YAML"),
]


@pytest.mark.parametrize(("text", "says"), [(t, s) for _, t, s in REFUSED],
                         ids=[name for name, _, _ in REFUSED])
def test_refused_at_parse_naming_the_bound(tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "exp.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_experiment_config(path)
    assert info.value.source == str(path)
    assert says in str(info.value) and DOCS in str(info.value)


STORED_REFUSED = [
    ("billion laughs, sequences", laughs(8, 9), "would expand"),
    ("billion laughs, mappings", laughs(8, 9, kind="map"), "would expand"),
    ("merge keys (<<) multiplying", merge_bomb(8, 9), "would expand"),
    ("a mapping that contains itself", HEAD + "data: &a {k: *a}\n", "contains it"),
    ("nested 300 deep", HEAD + "data: " + "[" * 300 + "]" * 300 + "\n",
     "nested more than 200 levels"),
]


@pytest.mark.parametrize(("text", "says"), [(t, s) for _, t, s in STORED_REFUSED],
                         ids=[name for name, _, _ in STORED_REFUSED])
def test_the_daemon_refuses_such_a_stored_config(text: str, says: str) -> None:
    """A config an older dethpc stored is refused by the daemon's read
    (``parse_stored``), not expanded; the stored bounds are wider (no text bound, no
    alias count, 200 levels, 4,000,000 units) so that all an accepted config becomes
    reads back."""
    with pytest.raises(ConfigError, match=says) as info:
        parse_stored(text)
    assert info.value.source == "the stored config"


def test_an_override_value_is_bounded_too() -> None:
    bomb = "[" * 500 + "]" * 500
    with pytest.raises(ConfigError, match="nested more than 100 levels") as info:
        apply_overrides({}, [f"data.x={bomb}"])
    assert "quote it" not in str(info.value)


def test_a_file_over_the_size_bound_is_refused_before_it_is_read(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    assert USER_LIMITS.max_chars is not None
    with path.open("w") as f:
        f.truncate(4 * USER_LIMITS.max_chars + 1)  # sparse: never read
    with pytest.raises(ConfigError, match="bytes of YAML"):
        load_yaml_file(path)


ORDINARY = HEAD.replace("searcher: {name: single, metric: loss}\n", "") + """\
data:
  searcher_defaults: &defaults
    max_length: {batches: 100}
    metric: loss
    smaller_is_better: true
  shared: &shared {paths: [/a, /b], workers: 4}
  train: {<<: *shared, split: train}
  val: {<<: *shared, split: val}
searcher:
  <<: *defaults
  name: single
hyperparameters:
  opt1: &opt {type: categorical, vals: [sgd, adam]}
  opt2: *opt
"""


def test_ordinary_anchors_and_merge_keys_still_work(tmp_path: Path) -> None:
    path = tmp_path / "exp.yaml"
    path.write_text(ORDINARY)
    cfg = load_experiment_config(path)
    assert cfg.searcher.metric == "loss"
    assert cfg.raw["data"]["val"] == {"paths": ["/a", "/b"], "workers": 4, "split": "val"}
    assert cfg.raw["hyperparameters"]["opt2"]["vals"] == ["sgd", "adam"]
    assert parse_stored(dump_config(cfg.raw)).raw == cfg.raw


def test_at_the_bounds_a_document_is_accepted() -> None:
    """100 aliases and 100 levels are allowed; so is what the dumper writes of it."""
    aliases = load_yaml_text("x: &x {a: 1}\nl: [" + ", ".join(["*x"] * 100) + "]\n", "t")
    assert len(aliases["l"]) == 100
    deep = load_yaml_text("[" * 99 + "1" + "]" * 99, "t")
    for _ in range(99):
        deep = deep[0]
    assert deep == 1


def test_a_stored_config_with_more_shared_parts_than_aliases_reads_back() -> None:
    """One merge of a mapping with many collection values shares each of them: the
    dumper writes an alias for every one (here 150 from 50 merges), so the stored
    read counts aliases only towards the expansion."""
    base = "base: &b {" + ", ".join(f"v{i}: [{i}]" for i in range(3)) + "}\n"
    maps = "".join(f"m{i}: {{<<: *b}}\n" for i in range(50))
    raw = {"name": "t", "entrypoint": "python3 train.py",
           "searcher": {"name": "single", "metric": "loss"},
           "data": load_yaml_text(base + maps, "t")}
    text = dump_config(raw)
    assert text.count("*id") >= 150
    assert parse_stored(text).raw == raw


#: modules that may parse YAML themselves, and why
OWN_PARSERS = {
    "config/_yaml.py": "the seam",
    "common/util.py": "Determined's det.util helpers, called by the user's code in its job",
    "core/_info.py": "the job side reads its run directory's config.yaml (written by "
                     "dump_config); core may not import config",
}
YAML_PARSE = re.compile(r"\byaml\.(safe_load|load|full_load|unsafe_load|load_all|"
                        r"safe_load_all|compose|compose_all)\b|\bLoader\s*=")


def test_product_code_parses_yaml_only_through_the_seam() -> None:
    package = Path(__file__).resolve().parents[3] / "dethpc"
    found = sorted(str(p.relative_to(package)) for p in package.rglob("*.py")
                   if YAML_PARSE.search(p.read_text()))
    assert [f for f in found if f not in OWN_PARSERS] == []
