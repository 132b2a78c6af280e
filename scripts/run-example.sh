#!/usr/bin/env bash
# The main job: an adaptive ASHA experiment of examples/digits on the local backend
# (no Slurm needed), then the best trial. Uses a private DETHPC_HOME unless one is set.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export DETHPC_HOME=${DETHPC_HOME:-$PWD/.dethpc}
export PATH=$PWD/.venv/bin:$PATH
unset DETHPC_CLUSTER_CONFIG
# the local backend even where Slurm answers (without this, no config on a Slurm login
# node means the detected Slurm config: docs/cluster-config.md)
export DETHPC_DETECT=0
exp=$(dethpc submit examples/digits/adaptive.yaml examples/digits --json | python -c 'import json,sys; print(json.load(sys.stdin)["id"])')
echo "experiment $exp submitted; waiting (dethpc experiment describe $exp to watch)"
dethpc experiment wait "$exp" || true
dethpc experiment describe "$exp"
dethpc daemon stop >/dev/null || true
