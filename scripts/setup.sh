#!/usr/bin/env bash
# Idempotent set-up on a fresh Debian machine: a virtualenv in .venv with dethpc, torch 2.13.0
# (CPU) and the dev tools. Sourced by run-example.sh and test.sh; safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "dethpc needs Python >= 3.11 (found: $("$PY" --version 2>&1))" >&2; exit 1
fi
if ! "$PY" -m venv --help >/dev/null 2>&1; then
  [ "$(id -u)" = 0 ] && { apt-get update -qq && apt-get install -y -qq python3-venv; }
fi
# the dashboard's browser test drives Debian's chromium through chromium-driver
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
  [ "$(id -u)" = 0 ] && { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; }
fi
# the remote-submit tests (tests/slurm/test_remote_slurm.py) start Debian's sshd
if [ ! -x /usr/sbin/sshd ]; then
  [ "$(id -u)" = 0 ] && { apt-get update -qq && apt-get install -y -qq openssh-server; }
fi
[ -x .venv/bin/python ] || "$PY" -m venv .venv
stamp=.venv/.dethpc-installed
want=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  .venv/bin/pip install -q --upgrade pip
  # torch exactly 2.13.0 (a CPU wheel is available locally; any other spec pulls CUDA wheels)
  .venv/bin/pip install -q "torch==2.13.0"
  # deepspeed with no prebuilt ops (DS_BUILD_OPS=0): keeps torch 2.13.0, installs in ~15 s
  DS_BUILD_OPS=0 .venv/bin/pip install -q -e ".[torch,dev,mpi,deepspeed,postgres,dashboard,browser-test,plots,tensorboard,notebook]"
  echo "$want" > "$stamp"
fi
