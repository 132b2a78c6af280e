#!/bin/sh
# install-dethpc.sh WHEELDIR [VENV]
#
# The one set of install steps shared by both dethpc runtime images:
#   * singularity/dethpc.def (Apptainer: %files copies WHEELDIR and this script, %post runs it)
#   * dethpc/devcluster/image.py (Charliecloud: mmdebstrap's customize hook runs it in the chroot)
#
# It creates a virtualenv VENV (default /opt/dethpc-venv) with the image's python3 and installs
# dethpc[torch] (dethpc, its dependencies, torch 2.13.0 CPU, scikit-learn) from WHEELDIR ONLY:
# --no-index, so pip never reaches an index (a bare "torch" from PyPI would pull GBs of CUDA
# wheels). WHEELDIR must hold every wheel; build it on the host with
#   pip wheel --no-deps --wheel-dir WHEELDIR /path/to/dethpc
#   pip download --only-binary=:all: --dest WHEELDIR --find-links WHEELDIR "dethpc[torch]" "torch==2.13.0"
# Needs in the image: python3 (3.11) and python3-venv. POSIX sh, so it runs under dash too.
set -eu

if [ "$#" -lt 1 ] || [ "$#" -gt 2 ]; then
    echo "usage: $0 WHEELDIR [VENV]" >&2
    exit 2
fi
WHEELS=$1
VENV=${2:-/opt/dethpc-venv}
TORCH_VERSION=2.13.0

if ! ls "$WHEELS"/dethpc-*.whl >/dev/null 2>&1; then
    echo "install-dethpc.sh: no dethpc wheel in $WHEELS" >&2
    exit 1
fi

# The host's pip configuration (index URLs, find-links, constraints) must not leak in.
PIP_CONFIG_FILE=/dev/null
PIP_NO_CACHE_DIR=1
PIP_DISABLE_PIP_VERSION_CHECK=1
export PIP_CONFIG_FILE PIP_NO_CACHE_DIR PIP_DISABLE_PIP_VERSION_CHECK

python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install --no-index --find-links "$WHEELS" \
    "dethpc[torch]" "torch==$TORCH_VERSION"

# Fail the build, not the first trial, when the result is wrong.
"$VENV/bin/python" - "$TORCH_VERSION" <<'EOF'
import sys

import dethpc
import torch

want = sys.argv[1]
got = torch.__version__.split("+")[0]
if got != want:
    sys.exit(f"install-dethpc.sh: torch {torch.__version__} installed, {want} wanted")
print(f"install-dethpc.sh: torch {torch.__version__} dethpc {dethpc.__version__} in {sys.prefix}")
EOF
