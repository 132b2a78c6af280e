"""``dethpc sbatch``'s wrapper without Jinja2 (``dethpc.jobs.wrapper_text``): the same
string as Jinja2's rendering of ``sbatch_templates/sbatch_wrapper.sbatch.j2`` over a
table of inputs, the templates' digest pinned (an edited template fails here until the
Python text follows it), and a site's own template still rendered by Jinja2."""

from __future__ import annotations

import hashlib
import itertools
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dethpc.common import jobenv
from dethpc.jobs import wrapper_text
from dethpc.jobs.templates import make_env, template_dir

HEADERS = [
    "#!/bin/bash",
    "#!/bin/bash\n#SBATCH --job-name=hello\n#SBATCH --nodes=2\n#SBATCH --time=00:05:00",
    "#!/bin/bash\n\n# a comment with {{ braces }}, {% tags %}, %s and $HOME\n#SBATCH -N 1",
    "#!/bin/bash\n#SBATCH --comment='it''s \"quoted\"'\n#SBATCH -J caf\u00e9 \u2603",
    "#!/bin/bash\r\n#SBATCH -t 1\r",          # CR left as the script has it
]
ADDITIONS = [[], ["--requeue"], ["--requeue", "--signal=B:USR1@60"]]
TASKS = [
    [('""', 3, "/runs/00000007/trials/00000003")],
    [("0", 11, "/r/t 11"), ("5", 12, "/r/it's/12"), ("1000", 13, "/r/$(rm -rf ~)/13")],
]
PATHS = [
    {"script": "/runs/7/context/job.sh", "python": "/venv/bin/python3",
     "bin_dir": "/runs/7/bin", "config": "/runs/7/config.yaml"},
    {"script": "/home/a b/ctx/j'o b.sh", "python": "/opt/py thon/bin/python",
     "bin_dir": "/x/{{bin}}", "config": "/x/%s/c.yaml"},
]
SIGNALS = [("USR1", 60), ("USR2", 0), ("SIGTERM", 120.5)]


def cases() -> list[dict[str, Any]]:
    out = []
    for n, (header, additions, tasks, paths, (sig, grace), forward) in enumerate(
            itertools.product(HEADERS, ADDITIONS, TASKS, PATHS, SIGNALS, (False, True))):
        out.append({"version": "0.1.0" if n % 2 else "1.2.3.dev4+g0abc", "experiment_id": n + 1,
                    "script_name": ["job.sh", "wrap", "sbatch", "my job.sh"][n % 4],
                    "header": header, "additions": additions, "tasks": tasks,
                    "signal": sig, "signal_grace_s": grace, "forward": forward, **paths})
    return out


def test_the_text_is_jinja2s_over_a_table_of_inputs() -> None:
    template = make_env().get_template(wrapper_text.TEMPLATES[0])
    checked = 0
    for values in cases():
        want = template.render(names=jobenv, **values)
        got = wrapper_text.wrapper_text(**values)
        assert got == want, values
        checked += 1
    assert checked == len(HEADERS) * len(ADDITIONS) * len(TASKS) * len(PATHS) * 3 * 2


def test_the_templates_are_the_ones_the_text_was_written_for() -> None:
    digest = hashlib.sha256()
    for name in wrapper_text.TEMPLATES:
        digest.update((template_dir() / name).read_bytes())
    assert digest.hexdigest() == wrapper_text.TEMPLATE_SHA256, (
        "a wrapper template changed: make dethpc/jobs/wrapper_text.py write the same text "
        "(this file's table test), then set its TEMPLATE_SHA256 to " + digest.hexdigest())


@pytest.mark.parametrize("name", wrapper_text.TEMPLATES)
def test_a_sites_own_template_is_rendered_by_jinja2(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    values = cases()[7]
    assert wrapper_text.render(**values) == wrapper_text.wrapper_text(**values)
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.setenv(jobenv.ENV_TEMPLATE_DIR, str(site))
    (site / "unrelated.j2").write_text("x")
    assert not wrapper_text.site_overrides()
    own = (template_dir() / name).read_text()
    (site / name).write_text(own.replace("dethpc", "SITE", 1)
                             if name == wrapper_text.TEMPLATES[0] else own + "{#- site -#}")
    assert wrapper_text.site_overrides()
    text = wrapper_text.render(**values)
    assert text == make_env().get_template(wrapper_text.TEMPLATES[0]).render(
        names=jobenv, **values)
    if name == wrapper_text.TEMPLATES[0]:
        assert "SITE" in text and text != wrapper_text.wrapper_text(**values)


def test_the_module_does_not_import_jinja2() -> None:
    done = subprocess.run(
        [sys.executable, "-c", "import sys, dethpc.jobs.wrapper_text as w\n"
         "w.render(version='1', experiment_id=1, script_name='j', header='#!/bin/sh', "
         "additions=[], tasks=[('\"\"', 1, '/t')], script='/s', signal='USR1', "
         "signal_grace_s=60, python='/p', bin_dir='/b', forward=False, config='/c')\n"
         "print('jinja2' in sys.modules)"],
        capture_output=True, text=True, check=True,
        env={"PATH": "/usr/bin:/bin"})
    assert done.stdout.strip() == "False"
