#!/usr/bin/env bash
# The JetStream target: a second virtual environment (.venv-jetstream) with the optional
# `jetstream` extra, which pulls TensorFlow through seqio (about 2 GB, kept out of .venv), then the
# tests that drive our JetStreamEngine through JetStream's own orchestrator. Both the tiny-model
# test and the real SmolLM2 one run; a missing JetStream fails here instead of skipping.
# Extra arguments go to pytest.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export JAXRL_VENV="${JAXRL_JETSTREAM_VENV:-$ROOT/.venv-jetstream}"
source "$ROOT/scripts/setup_env.sh" "dev,jetstream"
cd "$ROOT"
export JAXRL_REQUIRE_JETSTREAM=1
exec python -m pytest -q -rs -m "slow or not slow" tests/rollout/test_jetstream_engine.py "$@"
