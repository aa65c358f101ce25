#!/usr/bin/env bash
# Set up (venv + dev requirements), lint and format-check the repository with ruff, then run the
# whole test suite on the CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh dev
.venv/bin/ruff check .
.venv/bin/ruff format --check .
exec .venv/bin/python -m pytest -q tests "$@"
