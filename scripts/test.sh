#!/usr/bin/env bash
# The test command: sets up .venv with the dev, peers, gemma and tpu extras, then runs pytest
# (gemma: the Gemma 3 270M file its slow tests load; without it they skip; tpu: libtpu, so the
# tests compile programs for a v5e slice on this CPU; JAXRL_REQUIRE_TPU=1 makes a missing
# libtpu fail those tests instead of skipping them).
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -m slow` for the slow target.
#
# Without explicit test paths the suite runs in two pytest processes, tests/runners (whole
# training runs, generator threads) in its own, so that one part's state cannot take the other
# down. (A single process once segfaulted in an XLA:CPU compile ~94% through: every compiled
# program's code pages stayed mapped until the process hit vm.max_map_count; tests/conftest.py
# now drops compiled programs after each module and prints the count at the end.)
# Exit status: the first failure's, 5 only when neither part selected a test.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup_env.sh" "dev,peers,gemma,tpu"
set +e  # setup_env.sh sets -e; the exit statuses below are collected instead
cd "$ROOT"
export JAXRL_REQUIRE_TPU=1
for arg in "$@"; do
  if [[ "$arg" != -* && -e "$arg" ]]; then  # explicit paths: one process, as asked
    exec python -m pytest -q -rs "$@"
  fi
done
python -m pytest -q -rs tests --ignore=tests/runners "$@"
first=$?
python -m pytest -q -rs tests/runners "$@"
second=$?
for rc in "$first" "$second"; do
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 5 ]; then exit "$rc"; fi
done
if [ "$first" -eq 5 ] && [ "$second" -eq 5 ]; then exit 5; fi
exit 0
