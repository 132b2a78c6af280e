#!/usr/bin/env bash
# bench/peers/setup.sh -- the benchmark's own environment: bench/peers/.venv with dethpc,
# torch 2.13.0 (CPU), scikit-learn (extra `bench`: the digits the CNN trains on) and the
# peers (optuna, ray[tune], submitit, hydra-submitit-launcher; pyproject's extra `peers`),
# and psycopg (extra `postgres`: dethpc's store on PostgreSQL through PEERS_DETHPC_CLUSTER).
# Never dethpc's own .venv: the peers are not its dependencies.
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=bench/peers/.venv
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install -q --upgrade pip
"$venv/bin/pip" install -q "torch==2.13.0"
"$venv/bin/pip" install -q -e ".[torch,bench,peers,postgres]"
"$venv/bin/python" -c 'import optuna, ray, submitit, hydra_plugins.hydra_submitit_launcher as h; print("optuna", optuna.__version__, "ray", ray.__version__, "submitit", submitit.__version__)'
