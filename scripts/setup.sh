#!/usr/bin/env bash
# Create ./.venv and install what the project needs: `bash scripts/setup.sh` for train_gpt.py and the
# data tools, `bash scripts/setup.sh dev` adds the tests, record tools, benchmarks and plots.
#
# torch comes first, and a CPU machine never downloads the CUDA stack:
#   - a Python that already has torch (a GPU pod) keeps it: the venv sees the system site-packages
#     and pip never replaces that torch;
#   - otherwise $TORCH_SPEC is installed from, in this order of choice: $TORCH_INDEX_URL if set (or
#     the pip options written in TORCH_SPEC, which is split into words: TORCH_SPEC="torch==2.13.0
#     --index-url URL"); on a machine with an NVIDIA GPU, torch==2.9.1 from PyTorch's CUDA 12.8
#     index (the records' pair, which has a FlashAttention-3 wheel) unless TORCH_SPEC names
#     another (then from the default index); off Linux the default index (PyPI's macOS and
#     Windows builds are CPU builds); a CPU build of torch==2.13.0 among pip's local wheels (its
#     find-links), if there is one; else PyTorch's CPU-only index, because the default index's
#     Linux torch pulls the multi-GB nvidia-* packages.
# On a Hopper GPU (sm_90) it then installs FlashAttention-3, which the presets' records ran, for
# the torch and CUDA the venv has (below). One line says what it chose. PYTHON picks the
# interpreter (default python3, 3.10 or newer).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
CPU_INDEX_URL=https://download.pytorch.org/whl/cpu
requirements=requirements.txt
case "${1:-}" in
  "") ;;
  dev) requirements=requirements-dev.txt ;;
  *) echo "usage: bash scripts/setup.sh [dev]" >&2; exit 2 ;;
esac

if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
  echo "setup: needs Python 3.10 or newer; '$PYTHON' is $("$PYTHON" --version 2>&1 || echo missing)" \
    "(set PYTHON=python3.11, say)" >&2
  exit 1
fi
if [ ! -x .venv/bin/python ]; then
  system_site=""
  if "$PYTHON" -c "import torch" 2>/dev/null; then
    echo "setup: keeping this machine's torch $("$PYTHON" -c 'import torch; print(torch.__version__)')"
    system_site=--system-site-packages
  fi
  if ! "$PYTHON" -m venv $system_site .venv; then
    rm -rf .venv
    echo "setup: '$PYTHON -m venv' failed (on Debian or Ubuntu: apt-get install python3-venv)" >&2
    exit 1
  fi
fi
pip=(.venv/bin/python -m pip install -q --disable-pip-version-check)

# "cpu" if pip's local wheels alone (find-links, no index) hold a build of the spec without CUDA
# dependencies, with its file name; nothing otherwise (an old pip without --dry-run included).
local_cpu_build() {
  "${pip[@]}" --dry-run --no-index --no-deps --ignore-installed --report - "$@" 2>/dev/null |
    .venv/bin/python -c '
import json, sys
try:
    (item,) = json.load(sys.stdin)["install"]
except (ValueError, KeyError):
    sys.exit()
meta = item["metadata"]
cuda = any(r.lower().startswith("nvidia") for r in meta.get("requires_dist") or [])
if not cuda and "+cu" not in meta["version"] and "+rocm" not in meta["version"]:
    print("cpu", item["download_info"]["url"].rsplit("/", 1)[-1].replace("%2B", "+"))
' || true
}

nvidia_gpu() { command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; }
GPU_TORCH_SPEC=torch==2.9.1  # the records' torch; FlashAttention-3 has wheels for it (below)
GPU_TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128

if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  read -r -a torch_args <<<"${TORCH_SPEC:-torch==2.13.0}"
  spec=${torch_args[*]}
  if [ -z "${TORCH_SPEC:-}" ] && [ -z "${TORCH_INDEX_URL:-}" ] && nvidia_gpu; then
    echo "setup: installing $GPU_TORCH_SPEC from $GPU_TORCH_INDEX_URL (an NVIDIA GPU is present:" \
      "the records' torch and CUDA 12.8; TORCH_SPEC=... picks another)"
    "${pip[@]}" "$GPU_TORCH_SPEC" --index-url "$GPU_TORCH_INDEX_URL"
  elif [ -n "${TORCH_INDEX_URL:-}" ]; then
    echo "setup: installing $spec from TORCH_INDEX_URL=$TORCH_INDEX_URL"
    "${pip[@]}" "${torch_args[@]}" --index-url "$TORCH_INDEX_URL"
  elif [[ " $spec" == *" -"* ]]; then
    echo "setup: installing $spec (pip options as TORCH_SPEC gives them)"
    "${pip[@]}" "${torch_args[@]}"
  elif nvidia_gpu; then
    echo "setup: installing $spec from the default index (an NVIDIA GPU is present: its CUDA build)"
    "${pip[@]}" "${torch_args[@]}"
  elif [ "$(uname -s)" != Linux ]; then
    echo "setup: installing $spec from the default index (a CPU build on $(uname -s))"
    "${pip[@]}" "${torch_args[@]}"
  elif read -r kind file < <(local_cpu_build "${torch_args[@]}") && [ "$kind" = cpu ]; then
    echo "setup: installing $spec as the CPU build among pip's local wheels ($file)"
    "${pip[@]}" --no-index --no-deps "${torch_args[@]}"
    "${pip[@]}" "${torch_args[@]}"  # its dependencies, from the default index
  else
    echo "setup: installing $spec from PyTorch's CPU-only index $CPU_INDEX_URL (no NVIDIA GPU" \
      "here; the default index's Linux torch would pull the CUDA stack)"
    if ! "${pip[@]}" "${torch_args[@]}" --index-url "$CPU_INDEX_URL"; then
      echo "setup: could not install torch from $CPU_INDEX_URL; name another source with" \
        "TORCH_INDEX_URL=URL (TORCH_INDEX_URL=https://pypi.org/simple accepts the CUDA build)" >&2
      exit 1
    fi
  fi
fi
"${pip[@]}" -r "$requirements"
# FlashAttention-3 (the flash_attn_interface module), which every preset's record ran: on a Hopper
# GPU, the flash_attn_3 wheel built for this venv's torch and CUDA, from the wheel index named
# cu<CUDA>_torch<torch> (FA3_FIND_LINKS overrides it). Where none exists the presets stop at
# start-up saying so; the line below says what to do. Never fatal, and nothing on a CPU machine.
if nvidia_gpu && ! .venv/bin/python -c "import flash_attn_interface" 2>/dev/null; then
  read -r torch_tag cuda_tag sm < <(.venv/bin/python -c '
import torch
major = torch.cuda.get_device_capability()[0] if torch.cuda.is_available() else 0
print(torch.__version__.split("+")[0].replace(".", ""), (torch.version.cuda or "none").replace(".", ""), major)')
  if [ "$sm" != 9 ]; then
    echo "setup: FlashAttention-3 not installed: it needs a Hopper GPU (sm_90; this one is" \
      "sm_${sm}x); the presets need ATTENTION_BACKEND=fa2 or sdpa here"
  else
    links=${FA3_FIND_LINKS:-https://windreamer.github.io/flash-attention3-wheels/cu${cuda_tag}_torch${torch_tag}}
    if "${pip[@]}" --no-deps flash_attn_3 --find-links "$links" 2>/dev/null &&
      .venv/bin/python -c "import flash_attn_interface" 2>/dev/null; then
      echo "setup: installed FlashAttention-3 (flash_attn_3 from $links)"
    else
      echo "setup: WARNING: no FlashAttention-3 wheel for torch ${torch_tag} + CUDA ${cuda_tag} at" \
        "$links; the presets stop at start-up without it: a fresh .venv with the records' pair" \
        "(rm -rf .venv; unset TORCH_SPEC on a pod without torch: torch 2.9.1 + CUDA 12.8)," \
        "FA3_FIND_LINKS=<a wheel index>, or ATTENTION_BACKEND=sdpa to run anyway" >&2
    fi
  fi
fi
if [ ! -e .venv/bin/torchrun ]; then  # a kept system torch has its torchrun outside the venv
  # sh, not a python shebang: a shebang cannot hold a path with a space
  printf '#!/bin/sh\nexec "%s" -m torch.distributed.run "$@"\n' "$PWD/.venv/bin/python" \
    >.venv/bin/torchrun
  chmod +x .venv/bin/torchrun
fi
# lrzip, the binary the records' compressor runs (COMPRESSOR=pergroup, which PRESET=frontier sets):
# installed from the distribution's packages where this user may (root, or sudo without a password,
# with apt-get), else the one command is printed. Never fatal: the defaults and the tests do not
# need it (the tests that do skip, saying why).
if ! command -v lrzip >/dev/null; then
  as_root=none
  if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    as_root=""
  elif command -v apt-get >/dev/null && sudo -n true 2>/dev/null; then
    as_root="sudo -n"
  fi
  apt_install() {
    $as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q lrzip >/dev/null 2>&1
  }
  apt_update() { $as_root apt-get update -q >/dev/null 2>&1; }
  if [ "$as_root" != none ] && { apt_install || { apt_update && apt_install; }; }; then
    echo "setup: installed lrzip ($(lrzip -V 2>&1 | head -n 1)) for COMPRESSOR=pergroup"
  else
    echo "setup: WARNING: lrzip is not installed and could not be installed here; COMPRESSOR=pergroup" \
      "(PRESET=frontier) needs it: run 'sudo apt-get install -y lrzip' (or your system's package)" >&2
  fi
fi
echo "setup: done. Run the commands with .venv/bin/python and .venv/bin/torchrun, or first" \
  "'source .venv/bin/activate' (then python and torchrun are the venv's)."
