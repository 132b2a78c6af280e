"""The Jinja2 environment every job script is rendered with.

Owns: where the packaged templates are (``template_dir``), the environment
(``make_env``: ``StrictUndefined``; the ``shquote``/``shjoin`` filters; a site's template
directory, ``$DETHPC_TEMPLATE_DIR``, first, so a site can ``{% extends "base/..." %}``;
on request, Jinja2's cache of compiled templates in the user's cache directory,
``bytecode_cache``).
Its own module, importing Jinja2 and the standard library only, so that ``dethpc
sbatch``'s wrapper renders without the trial scripts' imports (issue 47 item 1; it is
written without Jinja2 at all unless a site overrides its template:
``dethpc.jobs.wrapper_text``);
``dethpc.jobs.render`` re-exports it.
Must not: render a particular script or build directives.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
from pathlib import Path

import jinja2

from dethpc.common.jobenv import ENV_TEMPLATE_DIR


def template_dir() -> Path:
    """The packaged templates (inside the wheel) or the repository's folder."""
    package = Path(__file__).resolve().parents[1]  # dethpc/ (a wheel ships the templates there)
    packaged = package / "sbatch_templates"
    return packaged if packaged.is_dir() else package.parent / "sbatch_templates"


def shquote(value: object) -> str:
    return shlex.quote(str(value))


def shjoin(argv: Sequence[object]) -> str:
    return " ".join(shlex.quote(str(a)) for a in argv)


def make_env(site_dir: Path | None = None, *, cached: bool = False) -> jinja2.Environment:
    """The environment; ``cached``: templates compiled once are kept, as Python bytecode,
    in the user's cache directory (``bytecode_cache``), so that a short-lived command
    (``dethpc sbatch``'s wrapper when a site overrides it: three templates, ~15 ms to
    compile) loads them instead."""
    base = jinja2.FileSystemLoader(str(template_dir()))
    loaders: list[jinja2.BaseLoader] = []
    site = site_dir or (Path(os.environ[ENV_TEMPLATE_DIR])
                        if os.environ.get(ENV_TEMPLATE_DIR) else None)
    if site is not None and site.is_dir():
        loaders.append(jinja2.FileSystemLoader(str(site)))
    loaders += [base, jinja2.PrefixLoader({"base": base})]
    env = jinja2.Environment(
        loader=jinja2.ChoiceLoader(loaders),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,  # noqa: S701 - shell scripts, quoting via shquote
        bytecode_cache=bytecode_cache() if cached else None,
    )
    env.filters["shquote"] = shquote
    env.filters["shjoin"] = shjoin
    return env


def bytecode_cache() -> jinja2.BytecodeCache | None:
    """Jinja2's own cache of compiled templates (each file keyed by the template's name
    and file, checked against its source's checksum: an edited template, a site's own, is
    compiled again) in ``$XDG_CACHE_HOME/dethpc/templates``; None when that directory is
    not this user's alone (what it holds is loaded as code) or cannot be made."""
    from dethpc.common.paths import make_private_dir, user_cache_dir

    try:
        directory = make_private_dir(user_cache_dir() / "templates")
        st = directory.stat()
    except OSError:
        return None
    if st.st_uid != os.getuid() or st.st_mode & 0o077:
        return None
    return jinja2.FileSystemBytecodeCache(str(directory))
