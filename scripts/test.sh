#!/usr/bin/env bash
# Set up (venv + dev requirements) and run the whole test suite on the CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh dev
exec .venv/bin/python -m pytest -q tests "$@"
