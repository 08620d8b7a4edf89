#!/usr/bin/env bash
# The main job: GRPO on SmolLM2-135M-Instruct and the default reasoning-gym task, on CPU.
# Extra arguments are config overrides, e.g. `bash scripts/main.sh --config.task.name=gcd`.
# The run directory is runs/grpo_smollm2 for the default task and runs/grpo_smollm2_<task>
# for another (WORKDIR=... chooses it); rerunning with the same directory resumes.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup_env.sh" ""
cd "$ROOT"
task=""
previous=""
for arg in "$@"; do
  case "$arg" in
    --config.task.name=*) task="${arg#--config.task.name=}" ;;
  esac
  if [ "$previous" = "--config.task.name" ]; then task="$arg"; fi
  previous="$arg"
done
default_workdir="runs/grpo_smollm2${task:+_$task}"
exec python -m jaxrl_llm.main --config experiments/configs/grpo_smollm2.py \
  --workdir "${WORKDIR:-$default_workdir}" "$@"
