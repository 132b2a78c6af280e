"""The job API's command line: argparse, one-line errors, exit statuses.

Owns: ``main(argv) -> int`` for the verbs ``report metrics``, ``report checkpoint``,
``latest-checkpoint``, ``should-stop`` and ``hparams`` (docs/shell-api.md). Exit
status: 0 done / yes; 1 no (``should-stop``) or none (``latest-checkpoint``); 2 an
error, one line on stderr (bad input, no trial for ``report``).
Must not: import the typer CLI or anything heavy; hold file logic (``_files`` does).
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NoReturn

import dethpc.launch.jobapi._files as _files
from dethpc.common.errors import DethpcError
from dethpc.common.jobenv import ENV_TRIAL_DIR
from dethpc.launch.jobapi._values import JobApiError, hparam_env, parse_pairs

NOT_IN_TRIAL = (f"not inside a dethpc trial or a Slurm job ({ENV_TRIAL_DIR} is unset and "
                "this is no Slurm job that could register itself)")


class _Parser(argparse.ArgumentParser):
    """argparse with a one-line error and exit status 2."""

    def error(self, message: str) -> NoReturn:
        raise JobApiError(f"{self.prog}: {message} (see {self.prog} --help)")


def _step(raw: str) -> int:
    try:
        step = int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--step {raw!r} is not a whole number") from None
    if step < 0:
        raise argparse.ArgumentTypeError(f"--step {step} is negative; steps count from 0")
    return step


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="dethpc", description="The job API of a dethpc trial "
                     "(docs/shell-api.md).")
    verbs = parser.add_subparsers(dest="verb", required=True, parser_class=_Parser)
    report = verbs.add_parser("report", help="report metrics or a checkpoint")
    what = report.add_subparsers(dest="what", required=True, parser_class=_Parser)
    metrics = what.add_parser("metrics", help="append one metrics record",
                              description="Append one training (default) or validation "
                              "record to the trial's metrics.jsonl. Values are JSON "
                              "(numbers, true/false, null), else strings.")
    metrics.add_argument("--step", type=_step, required=True, help="steps completed")
    group = metrics.add_mutually_exclusive_group()
    group.add_argument("--validation", action="store_true", help="a validation record "
                       "(the searcher reads its metric from these)")
    group.add_argument("--training", action="store_true", help="a training record (default)")
    metrics.add_argument("pairs", nargs="+", metavar="key=value")
    ckpt = what.add_parser("checkpoint", help="store a file or directory as a checkpoint",
                           description="Store PATH as a checkpoint of the trial "
                           "(hard-linked, or copied across filesystems); prints the "
                           "stored path.")
    ckpt.add_argument("path", metavar="PATH")
    ckpt.add_argument("--step", type=_step, default=None,
                      help="steps completed (default: the most reported so far)")
    ckpt.add_argument("--meta", action="append", default=[], metavar="key=value",
                      help="metadata kept with the checkpoint (repeatable)")
    ckpt.add_argument("--copy", action="store_true",
                      help="copy the files even on the same filesystem (for a script "
                      "that rewrites its checkpoint files in place)")
    verbs.add_parser("latest-checkpoint", help="print the checkpoint the next run resumes "
                     "from (exit 1 when none)")
    stop = verbs.add_parser("should-stop", help="exit 0 when the job must checkpoint and "
                            "exit now (prints preempt|stop|pause), else 1")
    stop.add_argument("-q", "--quiet", action="store_true", help="print nothing")
    hp = verbs.add_parser("hparams", help="print the trial's hyperparameters")
    form = hp.add_mutually_exclusive_group()
    form.add_argument("--json", action="store_true", help="as JSON (default)")
    form.add_argument("--env", action="store_true",
                      help="as export lines, for eval \"$(dethpc hparams --env)\"")
    return parser


def _trial(env: Mapping[str, str]) -> Path | None:
    from dethpc.common.detached import trial_dir

    return trial_dir(env)


def run(argv: Sequence[str], env: Mapping[str, str]) -> int:
    """Parse ``argv`` (the words after ``dethpc``) and run the verb; the exit status."""
    args = build_parser().parse_args(list(argv))
    if args.verb == "should-stop":
        trial = _trial(env)
        why = None if trial is None else _files.should_stop(trial, env)
        if why is None:
            return 1
        if not args.quiet:
            print(why.word, flush=True)
        return 0
    if args.verb == "hparams":
        hparams = _files.read_hparams(_trial(env), env)
        if args.env:
            lines = [f"export {k}={shlex.quote(v)}" for k, v in hparam_env(hparams).items()]
            sys.stdout.write("".join(line + "\n" for line in lines))
        else:
            import json

            print(json.dumps(hparams, indent=2))
        return 0
    trial = _trial(env)
    if args.verb == "latest-checkpoint":
        found = None if trial is None else _files.latest_checkpoint(trial, env)
        if found is None:
            return 1
        print(found)
        return 0
    if trial is None:
        raise JobApiError(f"dethpc report: {NOT_IN_TRIAL}")
    if args.what == "metrics":
        _files.report_metrics(trial, args.validation, args.step,
                              parse_pairs(args.pairs, "metric"))
        return 0
    path = _files.store_checkpoint(trial, env, Path(args.path), args.step,
                                   parse_pairs(args.meta, "--meta"), copy=args.copy)
    print(path)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``dethpc <verb> ...`` of the job API; errors are one line on stderr."""
    try:
        return run(sys.argv[1:] if argv is None else argv, os.environ)
    except DethpcError as exc:
        print(f"dethpc: error: {exc}", file=sys.stderr, flush=True)
        return exc.exit_code
    except OSError as exc:
        print(f"dethpc: error: {exc}", file=sys.stderr, flush=True)
        return 2
    except KeyboardInterrupt:
        return 130
    except SystemExit as exc:  # --help
        return exc.code if isinstance(exc.code, int) else 0
