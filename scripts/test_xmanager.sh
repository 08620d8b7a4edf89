#!/usr/bin/env bash
# The XManager target: XManager's launcher driving a two-trial sweep through its local executor
# (tests/workflow/test_xmanager_launch.py). XManager 0.8.5 pins protobuf<7 while constraints.txt
# pins 7.x, so it gets its own small venv (.venv-xmanager: xmanager and its Google Cloud
# clients, about 620 MB, no jax); the package is read from the checkout (PYTHONPATH) and the test
# runs without tests/conftest.py, which imports jax. No Docker daemon is needed. A missing
# XManager fails here instead of skipping. Extra arguments go to pytest.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${JAXRL_XMANAGER_VENV:-$ROOT/.venv-xmanager}"
if [ ! -x "$VENV/bin/pytest" ]; then
  echo "[setup] creating $VENV (XManager, a few minutes the first time)"
  "${PYTHON:-python3}" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -U pip
  "$VENV/bin/python" -m pip install -q "xmanager>=0.8.5" ml-collections numpy pytest
fi
cd "$ROOT"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" JAXRL_REQUIRE_XMANAGER=1
exec "$VENV/bin/python" -m pytest -q -rs --noconftest tests/workflow/test_xmanager_launch.py "$@"
