"""``dethpc sbatch``'s wrapper script written without Jinja2 (issue 47 item 1).

Owns: ``wrapper_text``: the text ``sbatch_templates/sbatch_wrapper.sbatch.j2`` (with its
macros ``_wrapped_run.j2`` and ``_run_end.j2``) renders, byte for byte, as plain Python
string building; ``render``: that text unless the site overrides one of those three
templates (``$DETHPC_TEMPLATE_DIR``), then Jinja2's rendering as before
(``dethpc.jobs.templates``); ``TEMPLATE_SHA256``: the three templates' digest this text
was written against.
Why: importing Jinja2 was ~26 ms of the ~117 ms of CPU of a ``dethpc sbatch``
(bench/cli/README.md): the goal is <= 0.15 s beside ``sbatch``.
Drift: tests/unit/jobs/test_wrapper_text.py renders both over a table of inputs
(arrays, additions or none, forwarding or not, quoting-hostile paths, odd headers) and
compares the strings, and fails when a template's digest is not ``TEMPLATE_SHA256``:
edit a template, then this module, then the digest.
Must not: import Jinja2 at module level (the light path of ``dethpc sbatch`` imports
this), read the templates, or decide what the values are (``plain.wrapper_script``).
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dethpc.common import jobenv

#: the templates this module writes (the first includes the others)
TEMPLATES = ("sbatch_wrapper.sbatch.j2", "_wrapped_run.j2", "_run_end.j2")
#: sha256 over the three templates' bytes, in ``TEMPLATES`` order
TEMPLATE_SHA256 = "caf78052329222a82dd73b376ca4b1583d14e8d28894b4179860ad8ba3f210c2"


def _q(value: object) -> str:
    """The ``shquote`` filter (``dethpc.jobs.templates.shquote``)."""
    return shlex.quote(str(value))


def wrapper_text(*, version: str, experiment_id: int, script_name: str, header: str,
                 additions: Sequence[str], tasks: Sequence[tuple[str, int, str]],
                 script: str, signal: str, signal_grace_s: object, python: str,
                 bin_dir: str, forward: bool, config: str) -> str:
    """What ``sbatch_wrapper.sbatch.j2`` renders for these values (its ``names`` are
    ``dethpc.common.jobenv``'s). ``tasks``: (array task id as written, trial id,
    trial directory)."""
    eid, py, bindir = str(experiment_id), _q(python), _q(bin_dir)
    out = [str(header)]
    out += [f"\n#SBATCH {d}" for d in additions]
    out.append(f"\n# dethpc {version}: experiment {eid}, `dethpc sbatch {script_name}`: "
               f"{len(tasks)} trial(s).\n# The lines above are the script's own header, "
               "unchanged")
    if additions:
        out.append(", then what dethpc adds\n# when the user did not choose it (--requeue, "
                   "the early signal to this batch shell)")
    out.append(".\n# The user's script runs unchanged from its copy with the arguments "
               "given to sbatch;\n# the early signal is recorded for `dethpc should-stop`")
    out.append(" and forwarded to the script" if forward
               else ", not forwarded (opt in\n# with --forward-signal)")
    out.append("; Slurm's own TERM and KILL end a script that does not stop.\nset -u\n"
               'case "${SLURM_ARRAY_TASK_ID:-}" in')
    out += [f"\n  {index}) TRIAL_ID={trial_id}; TRIAL_DIR={_q(trial_dir)} ;;"
            for index, trial_id, trial_dir in tasks]
    out.append("\n  *) echo \"dethpc: array task '${SLURM_ARRAY_TASK_ID:-}' has no trial "
               f'in experiment {eid}" >&2; exit 1 ;;\nesac\n')
    # _wrapped_run.j2's run_script(script_name, command, signal, signal_grace_s,
    # requeue_in_place=true, python, bin_dir, forward), det_env false
    out.append(
        'RUN="${SLURM_RESTART_COUNT:-0}"\nchild=0\ngot_signal=""\nsignal_at=0\n'
        "on_signal() {\n"
        "  # the run's first signal is its cause (the record's); signal.json keeps the latest\n"
        '  [ -n "$got_signal" ] || { got_signal="$1"; signal_at=$(date +%s); }\n'
        '  printf \'{"signal": "%s", "run": %d, "time": %s}\\n\' "$1" "$RUN" "$(date +%s)" \\\n'
        '    >"$TRIAL_DIR/signal.json.tmp" && mv -f "$TRIAL_DIR/signal.json.tmp" '
        '"$TRIAL_DIR/signal.json"\n'
        '  cat "$TRIAL_DIR/signal.json" >>"$TRIAL_DIR/signals.jsonl"')
    if forward:
        out.append('\n  if [ "$child" -gt 0 ]; then kill -s "$1" "$child" 2>/dev/null || true; '
                   'fi\n  echo "dethpc: got SIG$1; recorded for dethpc should-stop and '
                   'forwarded to the script" >&2')
    else:
        out.append('\n  echo "dethpc: got SIG$1; recorded for dethpc should-stop (not '
                   'forwarded to the script)" >&2')
    out.append(
        f"\n}}\ntrap 'on_signal {signal}' {signal}\ntrap 'on_signal TERM' TERM\n"
        # _run_end.j2's run_start(python, true) and done_already()
        f'JOB_REF=unknown; done_already=0\neval "$({py} -m dethpc.launch.run_start '
        '--trial-dir "$TRIAL_DIR")"\n'
        'if [ "$done_already" = 1 ]; then\n'
        "  # Slurm 25.11 keeps a preempted job's requeue-on-completion flag (GRACE_PREEMPT) "
        "when\n  # the grace ran out and Slurm requeued it, and turns the job's next "
        "completion into one\n  # more requeue (docs/dev-cluster.md): recorded as completed "
        'once more, nothing to do\n  echo "dethpc: job $JOB_REF completed in an earlier run; '
        'Slurm started it once more: nothing to do"\n  exit 0\nfi\n'
        # the caller's block: sbatch_wrapper.sbatch.j2's exports
        f"export {jobenv.ENV_EXPERIMENT_ID}={eid}\n"
        f'export {jobenv.ENV_TRIAL_ID}="$TRIAL_ID"\n'
        f'export {jobenv.ENV_TRIAL_DIR}="$TRIAL_DIR"\n'
        f"export {jobenv.ENV_EXPERIMENT_CONFIG}={_q(config)}\n"
        f"export {jobenv.ENV_PREEMPT_SIGNAL}={_q(signal)}\n"
        f'export {jobenv.ENV_RUN_ID}="$RUN"\n'
        f'if [ -d {bindir} ]; then export PATH={bindir}:"$PATH"; fi\n'
        f"latest=$({py} -m dethpc.surfaces.entry latest-checkpoint 2>/dev/null || true)\n"
        f'if [ -n "$latest" ]; then export {jobenv.ENV_LATEST_CHECKPOINT}="$latest"; fi\n'
        "# the user's own output files as Slurm resolved them, for `dethpc trial logs`\n"
        "scontrol -o show job \"$JOB_REF\" 2>/dev/null | tr ' ' '\\n' \\\n"
        "  | sed -n 's/^Std\\(Out\\|Err\\)=//p' | sort -u >>\"$TRIAL_DIR/outputs.txt\" "
        "|| true\n"
        "started_at=$(date +%s)\n"
        f'{_q(script)} "$@" &\nchild=$!\n'
        # _run_end.j2's wait_step()
        'while :; do\n  wait "$child"; rc=$?\n'
        "  # a trapped signal interrupts `wait` with a status > 128: keep waiting while the "
        'step lives\n  if [ "$rc" -gt 128 ] && kill -0 "$child" 2>/dev/null; then continue; '
        "fi\n  break\ndone\n"
        # _run_end.j2's run_end(python, "script", signal, signal_grace_s, true,
        # script=true, forward=forward)
        'reason=error; requeue=0; exit_code=$rc; job_state=""\n'
        "# the step is over: a signal from now on (the TERM at the end of a preemption's "
        "grace\n# or of a requeue) must not kill the decision half-way through its record; "
        "Slurm's\n# SIGKILL after KillWait still ends everything. The python inherits the "
        f"ignore.\ntrap '' TERM {signal}\n"
        f'eval "$({py} -m dethpc.launch.run_end --kind script --rc "$rc" \\\n'
        '  --signal "$got_signal" --signal-at "$signal_at" '
        f'--grace {signal_grace_s} --started-at "$started_at"'
        + (" --forward" if forward else "")
        + ' --trial-dir "$TRIAL_DIR")" \\\n'
        '  || echo "dethpc: python -m dethpc.launch.run_end failed: exiting with the step\'s '
        'code $rc" >&2\n'
        "# the user's output stays the script's own unless something happened to the run\n"
        f'[ "$reason" = completed ] || echo "dethpc: {script_name} exited with code $rc '
        '($reason)" >&2\n'
        # _run_end.j2's finish(true)
        '\nif [ "$requeue" = 1 ]; then\n'
        "  # this job alone (an array task by <array>_<task>): keep the job id; "
        "SLURM_RESTART_COUNT grows\n"
        '  scontrol requeue "$JOB_REF" || echo "dethpc: scontrol requeue $JOB_REF failed '
        '(already requeued?)" >&2\nfi\nexit "$exit_code"\n')
    return "".join(out)


def site_overrides(site_dir: Path | None = None) -> bool:
    """Whether the site's template directory (``$DETHPC_TEMPLATE_DIR``, or ``site_dir``)
    holds one of ``TEMPLATES``: then Jinja2 renders the wrapper, the site's template first."""
    where = site_dir or (Path(os.environ[jobenv.ENV_TEMPLATE_DIR])
                         if os.environ.get(jobenv.ENV_TEMPLATE_DIR) else None)
    return where is not None and any((where / name).is_file() for name in TEMPLATES)


def render(**values: Any) -> str:
    """The wrapper for ``values`` (``wrapper_text``'s keywords): ``wrapper_text``, or
    Jinja2 over the site's templates when ``site_overrides``."""
    if not site_overrides():
        return wrapper_text(**values)
    from dethpc.jobs.templates import make_env

    return make_env(cached=True).get_template(TEMPLATES[0]).render(names=jobenv, **values)
