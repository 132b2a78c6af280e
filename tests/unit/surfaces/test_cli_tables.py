"""Every table the CLI prints fits the terminal without splitting a word (issue 17 item 4).

Through typer's CliRunner against a private store holding an experiment with long
hyperparameter names and values, long paths and uuids, many trials: at
``COLUMNS=80`` every line is at most 80 characters and every long word (each starts
and ends with ``zq``) appears whole or cut once with ``…``, never in two pieces;
``--wide`` shows every value whole; ``--json`` parses.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from dethpc.control.experiments import current_user
from dethpc.store.models import (
    Batch,
    Checkpoint,
    CheckpointState,
    Event,
    Experiment,
    ExperimentState,
    Job,
    Metric,
    Trial,
    TrialState,
)
from dethpc.surfaces.cli.common import ENV
from dethpc.surfaces.cli.main import app
from tests.fixtures.cli_home import private_home

#: the long words planted in the store; each starts and ends with "zq", so a piece
#: of one split across lines still shows "zq" and is caught
SCHEDULE = "zqcosine_with_hard_restarts_and_linear_warmup_zq"
VOCAB = "zqshared_project_space_for_tokenizers_and_vocabularies_zq"
LONG_PATH = f"/scratch/{VOCAB}/{'zqcheckpoints_of_the_experiment_zq'}/ckpt"
HP_NAMES = ["zqlearning_rate_warmup_schedule_name_zq", "zqhidden_layer_width_multiplier_zq",
            "zqoptimizer_weight_decay_coefficient_zq"]
NAME = "zqexperiment_with_a_rather_long_name_zq"
LONG_EVENT = "zq" + "x" * 90 + "zq"

CONFIG = {
    "name": NAME, "entrypoint": "python3 train.py",
    "hyperparameters": {"lr": {"type": "log", "base": 10, "minval": -3, "maxval": -1}},
    "searcher": {"name": "random", "metric": "validation_loss", "smaller_is_better": True,
                 "max_trials": 40, "max_length": {"epochs": 3}},
}
TRIALS = 40


def uuid(n: int) -> str:
    return f"zq{n:06d}-aaaa-bbbb-cccc-dddddddddzq"


def hparams(n: int) -> dict[str, Any]:
    return {HP_NAMES[0]: SCHEDULE, "model": {HP_NAMES[1]: n % 7 + 1,
                                             "dropout": 0.1 + n / 1000},
            HP_NAMES[2]: 1e-5 * (n + 1),
            "tokenizer": f"/scratch/{VOCAB}/zqtokenizer_files_zq/vocab.json"}


def seed(run_dir: Path) -> dict[str, int]:
    """An experiment of TRIALS trials in several states, with checkpoints, validations,
    jobs and events; the ids the commands take."""
    ENV.cluster_path = None
    with ENV.store.session() as s:
        exp = Experiment(name=NAME, config_yaml=yaml.safe_dump(CONFIG), run_dir=str(run_dir),
                         owner=current_user(), labels=["zqbaseline_label_for_sweeps_zq"],
                         message=f"running; schedule {SCHEDULE}", progress=0.4)
        s.add(exp)
        s.flush()
        assert exp.id is not None
        batch = Batch(experiment_id=exp.id)
        s.add(batch)
        s.flush()
        states = [TrialState.COMPLETED, TrialState.RUNNING, TrialState.QUEUED,
                  TrialState.STOPPED]
        first = 0
        for n in range(TRIALS):
            st = states[n % len(states)]
            t = Trial(experiment_id=exp.id, request_id=n, hparams=hparams(n), state=st,
                      steps_completed=100 * n, target_length=3000, restarts=n % 3,
                      best_validation=None if st is TrialState.QUEUED else 1.0 / (n + 1),
                      latest_checkpoint=uuid(n), needs_job=st is TrialState.QUEUED)
            s.add(t)
            s.flush()
            assert t.id is not None
            first = first or t.id
            s.add(Checkpoint(uuid=uuid(n), experiment_id=exp.id, trial_id=t.id,
                             steps_completed=100 * n, path=f"{LONG_PATH}/{uuid(n)}",
                             validation_metric=1.0 / (n + 1), state=CheckpointState.COMPLETED,
                             meta={"zqframework_version_string_zq": SCHEDULE}))
            s.add(Metric(trial_id=t.id, kind="validation", steps=100 * n,
                         metrics={"validation_loss": 1.0 / (n + 1), "zqtop5_accuracy_zq": 0.5,
                                  "note": SCHEDULE}))
            s.add(Job(experiment_id=exp.id, trial_id=t.id, batch_id=batch.id or 0,
                      ref=f"{1000 + n}_{n}", nodes="zqnode_list_of_the_gpu_partition_zq[001-004]",
                      live=st is TrialState.RUNNING))
            s.add(Event(experiment_id=exp.id, trial_id=t.id, kind="submitted",
                        message=f"trial {t.id} submitted with schedule {SCHEDULE} {LONG_EVENT}"))
        return {"exp": exp.id, "trial": first}


SHORT = {"name": "short", "entrypoint": "python3 train.py",
         "hyperparameters": {"lr": 0.01, "bs": 32},
         "searcher": {"name": "random", "metric": "loss", "max_trials": 3,
                      "max_length": {"epochs": 1}}}


def seed_short(run_dir: Path) -> int:
    """An experiment whose hyperparameters fit in their own columns."""
    with ENV.store.session() as s:
        exp = Experiment(name="short", config_yaml=yaml.safe_dump(SHORT), run_dir=str(run_dir),
                         owner=current_user(), state=ExperimentState.COMPLETED)
        s.add(exp)
        s.flush()
        assert exp.id is not None
        for n in range(3):
            s.add(Trial(experiment_id=exp.id, request_id=n, state=TrialState.COMPLETED,
                        hparams={"lr": 0.01 * (n + 1), "bs": 32 * (n + 1)},
                        best_validation=0.5 / (n + 1)))
        return exp.id


ASHA = {"name": "asha", "entrypoint": "python3 train.py",
        "hyperparameters": {"lr": {"type": "log", "minval": -4, "maxval": 0, "base": 10},
                            HP_NAMES[0]: {"type": "categorical", "vals": [SCHEDULE, "zqx_zq"]}},
        "searcher": {"name": "adaptive_asha", "metric": "validation_loss",
                     "smaller_is_better": True, "time_metric": "batches", "max_time": 400,
                     "max_trials": 30, "max_concurrent_trials": 30, "mode": "standard",
                     "divisor": 4, "max_rungs": 3},
        "reproducibility": {"experiment_seed": 11}}


def seed_asha(run_dir: Path) -> int:
    """An ASHA experiment driven by the real searcher: its trials, their rungs, the
    brackets' cut-offs (describe's rung and searcher columns, rung tables)."""
    from tests.fixtures.asha_seed import seed_asha as seed

    return seed(ENV.store, ASHA, run_dir)


@pytest.fixture(scope="module")
def ids(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, int]]:
    """One private store for the module (seeding costs ~0.5 s): DETHPC_HOME, a local
    cluster config, the CLI's cached store reset before and after."""
    with private_home(tmp_path_factory.mktemp("home")) as h:
        out = seed(h / "runs" / "1")
        out["short"] = seed_short(h / "runs" / "2")
        out["asha"] = seed_asha(h / "runs" / "3")
        yield out


def run(*args: str, columns: int = 80) -> str:
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, (result.output, result.exception)
    return result.stdout


#: every command that prints a table (or describes a record line by line), by name
COMMANDS = {
    "list": ["experiment", "list"], "list-all": ["experiment", "list", "--all"],
    "describe": ["experiment", "describe", "{exp}"],
    "describe-asha": ["experiment", "describe", "{asha}"],
    "list-trials": ["experiment", "list-trials", "{exp}"],
    "list-checkpoints": ["experiment", "list-checkpoints", "{exp}"],
    "checkpoint-list": ["checkpoint", "list", "{exp}"],
    "events": ["experiment", "events", "{exp}"],
    "trial-describe": ["trial", "describe", "{trial}"],
    "checkpoint-describe": ["checkpoint", "describe", uuid(0)],
}


def command(name: str, ids: dict[str, int]) -> list[str]:
    return [a.format(**ids) for a in COMMANDS[name]]


WORD = re.compile(r"[\w.…-]+")
PLANTED = {SCHEDULE, VOCAB, NAME, LONG_EVENT, "zqbaseline_label_for_sweeps_zq",
           "zqcheckpoints_of_the_experiment_zq", "zqframework_version_string_zq",
           "zqtop5_accuracy_zq", "zqnode_list_of_the_gpu_partition_zq", "zqtokenizer_files_zq",
           "zqx_zq",
           *HP_NAMES,
           *(uuid(n) for n in range(TRIALS))}


def split_words(out: str) -> list[str]:
    """Pieces of the planted words that are neither whole nor cut once with ``…``."""
    bad = []
    for word in WORD.findall(out):
        for piece in re.split(r"[/.]", word):
            if "zq" not in piece and not piece.startswith("q"):
                continue
            if piece in PLANTED or (piece.endswith("…") and (
                    len(piece) == 1 or any(p.startswith(piece[:-1]) for p in PLANTED))):
                continue
            bad.append(piece)
    return bad


@pytest.mark.parametrize("columns", [80, 40, 132])
@pytest.mark.parametrize("name", list(COMMANDS))
def test_table_fits_80_columns_without_splitting_a_word(name: str, columns: int,
                                                        ids: dict[str, int]) -> None:
    out = run(*command(name, ids), columns=columns)
    assert "zq" in out or columns < 80, out  # at 40 columns they may all be left out
    long = [line for line in out.splitlines() if len(line) > columns]
    assert not long, long
    assert not split_words(out), (split_words(out), out)


def test_describe_gives_hyperparameters_their_own_columns_when_they_fit(
        ids: dict[str, int]) -> None:
    out = run("experiment", "describe", str(ids["short"]))
    header = next(line for line in out.splitlines() if line.startswith("trial"))
    assert header.split()[-2:] == ["lr", "bs"], out
    assert "hparams" not in header
    assert max(len(line) for line in out.splitlines()) <= 80
    # too many to fit: one compact k=v column, cut with an ellipsis
    out = run("experiment", "describe", str(ids["exp"]))
    assert f"{HP_NAMES[0][:5]}" in out and "hparams" in out


@pytest.mark.parametrize("name", ["describe", "list-trials", "list-checkpoints", "events",
                                  "trial-describe", "checkpoint-describe"])
def test_wide_shows_full_values(name: str, ids: dict[str, int]) -> None:
    out = run(*command(name, ids), "--wide")
    narrow = run(*command(name, ids))
    cut = {w for w in WORD.findall(narrow) if w.endswith("…")}
    dropped = "--wide shows them" in narrow
    assert cut or dropped, narrow  # at 80 columns something was cut or left out...
    assert "…" not in out and "left out" not in out  # ...and nothing is with --wide
    if name == "list-checkpoints":  # the paths, left out at 80 columns
        assert f"{LONG_PATH}/{uuid(0)}" in out
    whole = set(WORD.findall(out))
    for word in cut:  # every value cut at 80 columns shows whole
        stem = word[:-1]
        assert any(w.startswith(stem) and len(w) > len(stem) for w in whole), (word, out)
    if name in ("describe", "list-trials"):
        assert all(h in out for h in HP_NAMES)  # hyperparameters in their own columns
        assert all(uuid(n) in out for n in range(TRIALS))


def test_json_parses_for_every_table_command(ids: dict[str, int], tmp_path: Path) -> None:
    cfg = tmp_path / "exp.yaml"
    cfg.write_text(yaml.safe_dump(SHORT))
    for name in COMMANDS:
        data = json.loads(run(*command(name, ids), "--json"))
        assert data, name
    preview = json.loads(run("experiment", "preview-search", str(cfg), "--json"))
    assert preview["total_trials"] == 3


def _drawn(monkeypatch: pytest.MonkeyPatch, *, terminal: bool, rich_rows: bool,
           columns: int, wide: bool, rows: list[list[Any]], title: str = "Things") -> str:
    import io

    from rich.console import Console

    from dethpc.surfaces.cli import output
    from dethpc.surfaces.layout import Col

    buf = io.StringIO()
    monkeypatch.setenv("COLUMNS", str(columns))
    monkeypatch.setattr(output, "console", Console(file=buf, force_terminal=terminal or None))
    if rich_rows:
        monkeypatch.setattr(output, "plain_rows", lambda *_: None)
    output.table(title, [Col("id", keep=100), Col("name", shrink=True, keep=90),
                         Col("state" if title == "Things" else "state of it", keep=95),
                         Col("labels here", shrink=True, keep=30),
                         Col("owner", shrink=True, keep=60)], rows, wide=wide)
    return buf.getvalue()


@pytest.mark.parametrize("terminal", [False, True])
@pytest.mark.parametrize("columns", [24, 40, 80, 200])
@pytest.mark.parametrize("wide", [False, True])
def test_plain_rows_are_what_rich_draws_byte_for_byte(
        monkeypatch: pytest.MonkeyPatch, terminal: bool, columns: int, wide: bool) -> None:
    """``common.table`` writes plain rows itself (issue 47: rich's cost per cell); what it
    prints is rich's own table, byte for byte: in a terminal and not, cut, left out and
    wide, with empty, long, wide-character and control-character cells (those fall back
    to rich)."""
    import random

    rng = random.Random(columns * 2 + wide + 4 * terminal)
    words = ["", "a", "COMPLETED", "digits-random", "zq" * 20, "x y  z", "émigré",
             "数据集", "tab\there", "owner-name", "0.25", "1,2,3"]
    ascii_words = [w for w in words if w.isascii() and w.isprintable()]
    for n_rows, pool in [(0, words), (1, words), (7, words), (60, words), (7, ascii_words),
                         (60, ascii_words)]:
        rows = [[i, *(rng.choice(pool) for _ in range(4))] for i in range(n_rows)]
        plain = _drawn(monkeypatch, terminal=terminal, rich_rows=False, columns=columns,
                       wide=wide, rows=rows)
        drawn = _drawn(monkeypatch, terminal=terminal, rich_rows=True, columns=columns,
                       wide=wide, rows=rows)
        assert plain == drawn


def test_plain_rows_are_used_for_plain_ascii_cells() -> None:
    from dethpc.surfaces.cli.common import plain_rows

    assert plain_rows([["1", "ab"], ["22", ""]], [3, 4]) == "1    ab  \n22       \n"
    assert plain_rows([["1", "数"]], [3, 4]) is None
    assert plain_rows([["1", "abcde"]], [3, 4]) is None
    assert plain_rows([["1", "ab…"]], [3, 4]) == "1    ab… \n"   # a cut cell (describe's)


def _drawn_without_console(monkeypatch: pytest.MonkeyPatch, title: str, columns: int,
                           wide: bool, rows: list[list[Any]]) -> tuple[str, bool]:
    """What ``table`` prints on a stdout that is not a terminal and no console made yet
    (a command's first table), and whether it made one (drew with rich)."""
    import io

    from dethpc.surfaces.cli import output
    from dethpc.surfaces.layout import Col

    buf = io.StringIO()
    monkeypatch.setenv("COLUMNS", str(columns))
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delattr(output, "console", raising=False)
    monkeypatch.setattr("sys.stdout", buf)
    try:
        output.table(title, [Col("id", keep=100), Col("name", shrink=True, keep=90),
                             Col("state" if title == "Things" else "state of it", keep=95),
                             Col("labels here", shrink=True, keep=30),
                             Col("owner", shrink=True, keep=60)], rows, wide=wide)
    finally:
        made = output.__dict__.pop("console", None) is not None
    return buf.getvalue(), made


@pytest.mark.parametrize("columns", [20, 24, 33, 40, 80, 200])
@pytest.mark.parametrize("wide", [False, True])
def test_plain_head_is_what_rich_draws_byte_for_byte(monkeypatch: pytest.MonkeyPatch,
                                                     columns: int, wide: bool) -> None:
    """Not in a terminal, ``table`` writes its head (title, headers wrapped over lines,
    rule) without rich too; byte for byte rich's head, over titles shorter and longer than
    the table, narrow and wide terminals, empty and plain tables (and cells that are not
    plain ASCII, which fall back to rich)."""
    import random

    rng = random.Random(columns * 2 + wide)
    words = ["", "a", "COMPLETED", "digits-random", "zq" * 20, "x y  z", "émigré", "0.25"]
    plain_used = 0
    for title in ["Things", "T", "Experiments", "ASHA bracket 0 (12 trial(s) created)",
                  "x" * 70, "odd [b]markup[/b]", ":smile: emoji"]:
        for n_rows in (0, 1, 9):
            rows = [[i, *(rng.choice(words) for _ in range(4))] for i in range(n_rows)]
            plain, made = _drawn_without_console(monkeypatch, title, columns, wide, rows)
            drawn = _drawn(monkeypatch, terminal=False, rich_rows=True, columns=columns,
                           wide=wide, rows=rows, title=title)
            assert plain == drawn, (title, rows)
            plain_used += not made
    assert plain_used > 0


def test_prose_is_written_plain_only_where_rich_prints_it_as_it_is(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``say`` not in a terminal: plain lines where rich prints the text as it is; lines
    with what rich would change (an emoji code, control characters) go through rich."""
    import io

    from rich.console import Console

    from dethpc.surfaces.cli import output

    monkeypatch.setenv("COLUMNS", "30")
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE"):
        monkeypatch.delenv(name, raising=False)
    for text in ["Experiment 3 digits: COMPLETED (100%), searcher random, metric loss",
                 "a :smile: here", "x:y:z", "tab\there", "émigré [b]x[/b]", ""]:
        for wide in (False, True):
            buf = io.StringIO()
            monkeypatch.delattr(output, "console", raising=False)
            monkeypatch.setattr("sys.stdout", buf)
            try:
                output.say(text, wide=wide, hang=2)
            finally:
                output.__dict__.pop("console", None)
            rich_buf = io.StringIO()
            monkeypatch.setattr(output, "console", Console(file=rich_buf))
            output.say(text, wide=wide, hang=2)
            assert buf.getvalue() == rich_buf.getvalue(), text
    assert output.plain_text("a line: of prose") and not output.plain_text("a :smile:")
