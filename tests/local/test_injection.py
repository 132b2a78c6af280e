"""Shell injection: strings from a config never run, whatever they contain."""

import json
from pathlib import Path

import pytest

from tests.local.conftest import TOY, cli, write_config

NASTY = ["$(touch {m})", "'; touch {m} #", "`touch {m}`", '"; touch {m}; "', "a\nb $(touch {m})",
         "'; rm -rf ~ #"]


def test_injection_strings_never_run(home, tmp_path):
    marker = tmp_path / "pwned"
    nasty = [s.format(m=marker) for s in NASTY]
    cfg = write_config(
        tmp_path / "c.yaml", name=nasty[0], description=nasty[1], labels=nasty,
        hyperparameters={"x": 3.0, "s1": nasty[0], "s2": {"type": "categorical",
                                                           "vals": [nasty[1]]},
                         "nested": {"s3": nasty[2]}},
        searcher={"name": "single", "metric": "validation_loss", "max_length": {"batches": 3}},
        environment={"environment_variables": [f"DETHPC_TEST_{i}={v}"
                                               for i, v in enumerate(nasty)]})
    out = cli("submit", cfg, TOY, "--json")
    exp = json.loads(out.stdout)["id"]
    cli("experiment", "wait", exp, "--timeout", "120", timeout=150)
    d = json.loads(cli("experiment", "describe", exp, "--json").stdout)
    assert d["state"] == "COMPLETED"
    assert not marker.exists()
    assert d["name"] == nasty[0] and d["labels"] == nasty
    seen = json.loads((Path(d["run_dir"]) / "trials" / str(d["trials"][0]["id"])
                       / "seen.json").read_text())
    assert seen["hparams"]["s1"] == nasty[0]
    assert seen["hparams"]["s2"] == nasty[1]
    assert seen["hparams"]["nested"]["s3"] == nasty[2]
    assert seen["env"] == {f"DETHPC_TEST_{i}": v for i, v in enumerate(nasty)}
    # the rendered script is what was run: it quotes and passes bash -n
    rendered = cli("render", cfg, TOY).stdout
    assert "touch" in rendered and not marker.exists()


@pytest.mark.parametrize("override,fragment", [
    ("searcher.max_trials=abc", "searcher.max_trials"),
    ("searcher.name=asha", "searcher.name"),
    ("sercher.name=random", "did you mean 'searcher'"),
])
def test_bad_config_is_a_clear_error_without_traceback(home, tmp_path, override, fragment):
    cfg = write_config(tmp_path / "c.yaml")
    proc = cli("submit", cfg, TOY, "--config", override, check=False)
    assert proc.returncode == 2
    assert fragment in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert not (Path(home) / "runs").exists() or not any((Path(home) / "runs").iterdir())
