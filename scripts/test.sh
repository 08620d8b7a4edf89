#!/usr/bin/env bash
# The test command: sets up .venv with the dev, peers and gemma extras, then runs pytest
# (gemma: the Gemma 3 270M file its slow tests load; without it they skip).
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -m slow` for the slow target.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup_env.sh" "dev,peers,gemma"
cd "$ROOT"
exec python -m pytest -q -rs "$@"
