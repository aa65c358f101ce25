#!/usr/bin/env bash
# The whole main job on a CPU machine: venv + requirements, the offline stdlib dataset if missing,
# then a small model trained by 2 processes under torchrun (gloo) in a few minutes; it ends with the
# final_int8_zlib_roundtrip_exact line. Any variable below can be overridden from the environment.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/python data/build_local_dataset.py  # does nothing when the dataset is already built
export DATA_PATH=${DATA_PATH:-./data/datasets/stdlib_sp1024}
export TOKENIZER_PATH=${TOKENIZER_PATH:-./data/tokenizers/stdlib_1024_bpe.model}
export NUM_LAYERS=${NUM_LAYERS:-4} MODEL_DIM=${MODEL_DIM:-128} NUM_HEADS=${NUM_HEADS:-4} NUM_KV_HEADS=${NUM_KV_HEADS:-2}
export TRAIN_SEQ_LEN=${TRAIN_SEQ_LEN:-256} TRAIN_BATCH_TOKENS=${TRAIN_BATCH_TOKENS:-8192} VAL_BATCH_SIZE=${VAL_BATCH_SIZE:-32768}
export ITERATIONS=${ITERATIONS:-300} WARMDOWN_ITERS=${WARMDOWN_ITERS:-60} WARMUP_STEPS=${WARMUP_STEPS:-5}
export VAL_LOSS_EVERY=${VAL_LOSS_EVERY:-100} TRAIN_LOG_EVERY=${TRAIN_LOG_EVERY:-25} MAX_WALLCLOCK_SECONDS=${MAX_WALLCLOCK_SECONDS:-240}
exec .venv/bin/torchrun --standalone --nproc_per_node=2 train_gpt.py
