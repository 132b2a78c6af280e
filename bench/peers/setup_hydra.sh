#!/usr/bin/env bash
# bench/peers/setup_hydra.sh -- Hydra's own environment for bench/peers_scale's Hydra runner:
# bench/peers/.venv-hydra with the Hydra *release* 1.3.8, its Optuna sweeper and its submitit
# launcher. Its own venv because hydra-optuna-sweeper 1.3.0 (the newest release) requires
# optuna>=2.10,<3 while bench/peers/.venv holds optuna 5 for the Optuna runner; and
# setup.sh's resolver picks hydra-core 1.4.0rc (a pre-release) there.
# Built on the system's python3.11 (not a python under /root), so that the benchmark's
# user (dethpc-bench) can run it. Never dethpc's own .venv: the peers are not its
# dependencies. The emulated trial needs nothing more: the repository on PYTHONPATH.
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=bench/peers/.venv-hydra
python=${PYTHON:-/usr/bin/python3.11}
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
"$venv/bin/pip" install -q --upgrade pip
# sqlalchemy<2: optuna 2.10 predates SQLAlchemy 2.0's API (the sweeper's storage: null
# keeps the study in memory, but optuna imports its RDB module either way)
"$venv/bin/pip" install -q "hydra-core==1.3.8" "hydra-optuna-sweeper==1.3.0" \
    "hydra-submitit-launcher==1.2.0" "optuna>=2.10,<3" "sqlalchemy<2"
"$venv/bin/python" -c 'import hydra, optuna, submitit, hydra_plugins.hydra_optuna_sweeper, hydra_plugins.hydra_submitit_launcher; print("hydra", hydra.__version__, "optuna", optuna.__version__, "submitit", submitit.__version__)'
