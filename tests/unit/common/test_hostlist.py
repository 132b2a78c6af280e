"""Table tests for Slurm hostlist expansion and compression."""

from __future__ import annotations

import pytest

from dethpc.common.errors import CommandError, DethpcError
from dethpc.common.hostlist import HostlistSyntaxError, compress_hostlist, expand_hostlist
from dethpc.common.runner import CommandResult, CommandRunner

EXPAND = [
    ("n1", ["n1"]),
    ("", []),
    ("n[1-3,7]", ["n1", "n2", "n3", "n7"]),
    ("gpu-[01-04]", ["gpu-01", "gpu-02", "gpu-03", "gpu-04"]),
    ("n[8-10]", ["n8", "n9", "n10"]),
    ("n[08-10]", ["n08", "n09", "n10"]),
    ("n1,gpu-[01-02]", ["n1", "gpu-01", "gpu-02"]),
    ("a[1-2]b[3-4]", ["a1b3", "a1b4", "a2b3", "a2b4"]),
    ("rack[1-2]-n[1,3]", ["rack1-n1", "rack1-n3", "rack2-n1", "rack2-n3"]),
    ("n[1-2].ib", ["n1.ib", "n2.ib"]),
    ("n[3],m5", ["n3", "m5"]),
    ("n[1-2],n[1-2]", ["n1", "n2", "n1", "n2"]),
    (" n[1-2] ", ["n1", "n2"]),
]


@pytest.mark.parametrize(("spec", "hosts"), EXPAND)
def test_expand(spec: str, hosts: list[str]) -> None:
    assert expand_hostlist(spec) == hosts


BAD = ["n[1-3", "n1-3]", "n[3-1]", "n[a-b]", "n[1-2]]", "n[[1]]", "n1,,n2", "n[1-]"]


@pytest.mark.parametrize("spec", BAD)
def test_malformed_raises_without_runner(spec: str) -> None:
    with pytest.raises(HostlistSyntaxError) as info:
        expand_hostlist(spec)
    assert spec in str(info.value)
    assert isinstance(info.value, DethpcError) and isinstance(info.value, ValueError)


class FakeScontrol(CommandRunner):
    def __init__(self, stdout: str = "", fail: bool = False) -> None:
        super().__init__()
        self.stdout, self.fail, self.calls = stdout, fail, []  # type: ignore[var-annotated]

    def run(self, argv, **kwargs):  # type: ignore[no-untyped-def, override]
        self.calls.append(list(argv))
        if self.fail:
            raise CommandError(argv, 1, "", "Invalid hostlist")
        return CommandResult(tuple(argv), 0, self.stdout, "")


def test_fallback_to_scontrol_only_when_parsing_fails() -> None:
    runner = FakeScontrol("weird1\nweird2\n")
    assert expand_hostlist("n[1-2]", runner) == ["n1", "n2"]
    assert runner.calls == []
    assert expand_hostlist("n[1-3", runner) == ["weird1", "weird2"]
    assert runner.calls == [["scontrol", "show", "hostnames", "n[1-3"]]


def test_fallback_failure_is_syntax_error() -> None:
    with pytest.raises(HostlistSyntaxError, match="scontrol"):
        expand_hostlist("n[1-3", FakeScontrol(fail=True))


COMPRESS = [
    (["n1", "n2", "n3", "n7"], "n[1-3,7]"),
    (["gpu-01", "gpu-02", "gpu-03"], "gpu-[01-03]"),
    (["n1"], "n1"),
    ([], ""),
    (["n1", "gpu-01", "gpu-02"], "n1,gpu-[01-02]"),
    (["n9", "n10", "n11"], "n[9-11]"),
    (["n3", "n1"], "n3,n1"),  # order is rank order: kept
    (["login", "n01", "n02", "n2"], "login,n[01-02],n2"),
    (["n1", "n2", "m1", "n3"], "n[1-2],m1,n3"),
]


@pytest.mark.parametrize(("hosts", "spec"), COMPRESS)
def test_compress(hosts: list[str], spec: str) -> None:
    assert compress_hostlist(hosts) == spec
    assert expand_hostlist(spec) == hosts
