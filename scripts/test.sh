#!/usr/bin/env bash
# Set up (venv + dev requirements), lint and format-check the repository with ruff, then run the
# whole test suite on the CPU. `bash scripts/test.sh quick` runs only the tests that start no
# training run (pytest -m "not slow"; tests/conftest.py says which are slow): the loop while
# editing. Any further argument goes to pytest (`bash scripts/test.sh quick -k loader`).
set -euo pipefail
cd "$(dirname "$0")/.."
marks=()
if [[ "${1:-}" == quick ]]; then
  shift
  marks=(-m "not slow")
fi
bash scripts/setup.sh dev
.venv/bin/ruff check .
.venv/bin/ruff format --check .
exec .venv/bin/python -m pytest -q tests ${marks[@]+"${marks[@]}"} "$@"
