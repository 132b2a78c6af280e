#!/usr/bin/env bash
# The whole test suite. Brings the dev Slurm cluster up when it can (root on Debian);
# under CI=true the Slurm tier is mandatory and a missing cluster fails the run.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh || exit 1
export PATH=$PWD/.venv/bin:$PATH
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  python -m dethpc.devcluster up || { [ "${CI:-}" = true ] && { echo "dev cluster failed to start" >&2; exit 1; }; }
elif [ "${CI:-}" = true ]; then
  echo "CI needs root to start the dev Slurm cluster" >&2; exit 1
fi
python -m pytest "$@"
