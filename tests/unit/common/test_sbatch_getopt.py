"""Table tests: getopt's complaints as sbatch prints them -> the option, and the
``sbatch_args`` item that spelled it (``dethpc.common.sbatch_options``)."""

from __future__ import annotations

import pytest

from dethpc.common.sbatch_options import complained_option, getopt_complaint, spells_option


@pytest.mark.parametrize(("text", "option"), [
    ("sbatch: unrecognized option '--thisisnotavalidslurmoption'", "--thisisnotavalidslurmoption"),
    # glibc quotes what was written, a glued value included
    ("sbatch: unrecognized option '--frob=2'", "--frob"),
    ("sbatch: invalid option -- 'Z'", "-Z"),
    ("sbatch: option '--partition' requires an argument", "--partition"),
    ("sbatch: option requires an argument -- 'p'", "-p"),
    ("sbatch: option '--mem-per' is ambiguous; possibilities: '--mem-per-cpu' '--mem-per-gpu'",
     "--mem-per"),
    ("sbatch: option '--hold' doesn't allow an argument", "--hold"),
    # Slurm's own refusals are not getopt's
    ("Requested node configuration is not available", None),
    ("Invalid partition name specified", None),
])
def test_complained_option(text: str, option: str | None) -> None:
    assert complained_option(text) == option
    assert getopt_complaint(text) is (option is not None)


def test_a_complaint_that_names_no_option() -> None:
    assert getopt_complaint("sbatch: unrecognized option")
    assert complained_option("sbatch: unrecognized option") is None


@pytest.mark.parametrize(("arg", "option", "spells"), [
    ("--thisisnotavalidslurmoption = willfail", "--thisisnotavalidslurmoption", True),
    ("--thisisnotavalidslurmoption=willfail", "--thisisnotavalidslurmoption", True),
    ("--thisisnotavalidslurmoption willfail", "--thisisnotavalidslurmoption", True),
    ("--thisisnotavalidslurmoption2", "--thisisnotavalidslurmoption", False),
    ("--partition", "--partition", True),
    ("!--frob", "--frob", True),
    ("-Z3", "-Z", True),
    ("-Z", "-Z", True),
    ("--Zed", "-Z", False),
    ("-p low", "-Z", False),
    ("", "--x", False),
])
def test_spells_option(arg: str, option: str, spells: bool) -> None:
    assert spells_option(arg, option) is spells
