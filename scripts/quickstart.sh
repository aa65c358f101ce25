#!/usr/bin/env bash
# The whole main job on a CPU machine: venv + requirements, the offline stdlib dataset if missing,
# then a small model trained by 2 processes under torchrun (gloo) in a few minutes; it ends with the
# final_int8_zlib_roundtrip_exact line. The model and run settings are in scripts/quickstart.env;
# any of them, and DATA_PATH / TOKENIZER_PATH (another dataset: nothing is built then), can be
# overridden from the environment. `PRESET=frontier bash scripts/quickstart.sh` runs a leaderboard
# record's network, schedule, quantizer and evaluation at this size (docs/frontier.md).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ -z "${DATA_PATH:-}" ]; then
  .venv/bin/python data/build_local_dataset.py  # does nothing when the dataset is already built
fi
export DATA_PATH=${DATA_PATH:-./data/datasets/stdlib_sp1024}
export TOKENIZER_PATH=${TOKENIZER_PATH:-./data/tokenizers/stdlib_1024_bpe.model}
if [ "$TOKENIZER_PATH" = ./data/tokenizers/stdlib_1024_bpe.model ]; then
  export VOCAB_SIZE=${VOCAB_SIZE:-1024}  # its vocabulary, whatever a PRESET's record trained on
fi
while IFS='=' read -r name value; do
  case "$name" in '' | '#'*) continue ;; esac
  # every preset's warm-down is its WARMDOWN_FRAC, which replaces WARMDOWN_ITERS: not set, so the
  # run's settings: line shows only what decides
  if [ -n "${PRESET:-}" ] && [ "$name" = WARMDOWN_ITERS ]; then continue; fi
  [ -n "${!name:-}" ] || export "$name=$value"
done <scripts/quickstart.env
exec .venv/bin/torchrun --standalone --nproc_per_node=2 train_gpt.py
