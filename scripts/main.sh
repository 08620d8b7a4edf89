#!/usr/bin/env bash
# The main job: GRPO on SmolLM2-135M-Instruct and the default reasoning-gym task, on CPU.
# Extra arguments are config overrides, e.g. `bash scripts/main.sh --config.train.num_steps=5`.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup_env.sh" ""
cd "$ROOT"
exec python -m jaxrl_llm.main --config experiments/configs/grpo_smollm2.py \
  --workdir "${WORKDIR:-runs/grpo_smollm2}" "$@"
