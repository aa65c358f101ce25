#!/usr/bin/env bash
# Create ./.venv and install what the project needs: `bash scripts/setup.sh` for train_gpt.py and the
# data tools, `bash scripts/setup.sh dev` adds the tests, record tools, benchmarks and plots.
# A machine that already has torch (a GPU pod) keeps it: the venv sees the system site-packages and
# pip never replaces that torch. Elsewhere torch comes first as $TORCH_SPEC (default torch==2.13.0,
# the CPU build on this project's machines), so no multi-GB CUDA wheels land on a CPU box.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
requirements=requirements.txt
[ "${1:-}" = "dev" ] && requirements=requirements-dev.txt

if [ ! -x .venv/bin/python ]; then
  if "$PYTHON" -c "import torch" 2>/dev/null; then
    echo "setup: keeping this machine's torch $("$PYTHON" -c 'import torch; print(torch.__version__)')"
    "$PYTHON" -m venv --system-site-packages .venv
  else
    "$PYTHON" -m venv .venv
  fi
fi
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  echo "setup: installing ${TORCH_SPEC:-torch==2.13.0}"
  .venv/bin/python -m pip install -q --disable-pip-version-check "${TORCH_SPEC:-torch==2.13.0}"
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -r "$requirements"
