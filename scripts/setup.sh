#!/usr/bin/env bash
# Idempotent set-up on a fresh Debian machine; safe to run again.
#
#   bash scripts/setup.sh           the main job's needs (scripts/run-example.sh): a
#                                   virtualenv in .venv with dethpc, torch 2.13.0 (CPU) and
#                                   numpy; nothing else
#   bash scripts/setup.sh --tests   the test suite's needs (scripts/test.sh) on top: every
#                                   optional extra the tests use and, as root, Debian's
#                                   chromium + chromium-driver (the dashboard's browser
#                                   test) and openssh-server (the remote-submit tests).
#                                   Without root it says which tests cannot be prepared.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=main
[ "${1:-}" = --tests ] && mode=tests
PY=${PYTHON:-python3}
root=false
[ "$(id -u)" = 0 ] && root=true
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "dethpc needs Python >= 3.11 (found: $("$PY" --version 2>&1))" >&2; exit 1
fi
if ! "$PY" -m venv --help >/dev/null 2>&1; then
  if $root; then apt-get update -qq && apt-get install -y -qq python3-venv
  else echo "setup: python3 -m venv is missing; install python3-venv (needs root)" >&2; exit 1; fi
fi
if [ "$mode" = tests ]; then
  missing=()
  # the dashboard's browser test drives Debian's chromium through chromium-driver
  if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
    if $root; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
    else missing+=("tests/local/test_dashboard_browser.py (Debian's chromium and chromium-driver)"); fi
  fi
  # the remote-submit tests (tests/slurm/test_remote_slurm.py) start Debian's sshd
  if [ ! -x /usr/sbin/sshd ]; then
    if $root; then apt-get update -qq && apt-get install -y -qq openssh-server
    else missing+=("tests/slurm/test_remote_slurm.py (Debian's openssh-server)"); fi
  fi
  # a home on a real network filesystem (tests/local/test_store_network_fs_local.py):
  # sshfs over FUSE (this kernel has no NFS)
  if ! command -v sshfs >/dev/null 2>&1; then
    if $root; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq sshfs >/dev/null
    else missing+=("tests/local/test_store_network_fs_local.py (Debian's sshfs)"); fi
  fi
  if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: not root, so these cannot be prepared and will skip (or fail under CI=true):" >&2
    printf '  %s\n' "${missing[@]}" >&2
    echo "  and scripts/test.sh cannot start the dev Slurm cluster nor install PostgreSQL" >&2
  fi
fi
[ -x .venv/bin/python ] || "$PY" -m venv .venv
want=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)
# the tests' install is a superset of the main job's: either stamp satisfies the main job
if [ "$(cat .venv/.dethpc-tests 2>/dev/null)" = "$want" ]; then exit 0; fi
if [ "$mode" = main ] && [ "$(cat .venv/.dethpc-main 2>/dev/null)" = "$want" ]; then exit 0; fi
.venv/bin/pip install -q --upgrade pip
# --no-compile, then compileall on every core: pip byte-compiles one file at a time (torch
# alone: 41 s installed that way, 10 s + 18 s on 2 cores); the result is the same .pyc
# files, so no process compiles at import (a job run as another user could not write them)
# torch exactly 2.13.0 (a CPU wheel is available locally; any other spec pulls CUDA wheels)
.venv/bin/pip install -q --no-compile "torch==2.13.0"
if [ "$mode" = main ]; then
  .venv/bin/pip install -q --no-compile -e ".[torch]"
else
  # deepspeed with no prebuilt ops (DS_BUILD_OPS=0): keeps torch 2.13.0, installs in ~15 s
  DS_BUILD_OPS=0 .venv/bin/pip install -q --no-compile -e ".[torch,dev,mpi,deepspeed,postgres,dashboard,browser-test,plots,tensorboard,notebook,site-scripts-test]"
fi
if [ "$mode" = tests ]; then
  # Determined 0.38.1, the oracle of tests/local/test_determined_oracle.py: the
  # determined-oracle extra's packages, with --no-deps, in a folder of their own that only
  # that test's Determined-side subprocess puts on PYTHONPATH. Not in the venv's
  # site-packages: its full requirements would downgrade requests (<2.32) and add ~35
  # cloud/CLI packages dethpc's tests never ran with, and `import determined` would then
  # resolve in every dethpc job and test on this machine (a trial that kept Determined's
  # import would silently run Determined's code instead of failing). Its local Trainer
  # needs only ruamel.yaml and appdirs beyond what the venv holds (torch is the venv's).
  oracle=$(.venv/bin/python -c 'import tomllib; print(" ".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["determined-oracle"]))')
  rm -rf .venv/determined-oracle
  # shellcheck disable=SC2086
  .venv/bin/pip install -q --no-compile --no-deps --target .venv/determined-oracle $oracle
  .venv/bin/python -m compileall -q -j 0 .venv/determined-oracle >/dev/null 2>&1 || true
fi
# a file compileall cannot compile (some packages ship Python-2 test data) is left as
# pip leaves it: not an error
.venv/bin/python -m compileall -q -j 0 .venv/lib >/dev/null 2>&1 || true
if [ "$mode" = main ]; then echo "$want" > .venv/.dethpc-main
else echo "$want" > .venv/.dethpc-tests; fi
