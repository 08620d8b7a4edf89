#!/usr/bin/env bash
# The test command: sets up .venv with the dev, peers, gemma and tpu extras, then runs pytest
# (gemma: the Gemma 3 270M file its slow tests load; without it they skip; tpu: libtpu, so the
# tests compile programs for a v5e slice on this CPU; JAXRL_REQUIRE_TPU=1 makes a missing
# libtpu fail those tests instead of skipping them).
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -m slow` for the slow target (real
# models, one process) and `bash scripts/test.sh -m heavy` for the heavy one (whole runs of the
# tiny model and large compiles whose coverage the default run keeps in a faster form; listed in
# tests/heavy.py; two workers).
#
# The default run (no arguments) spreads the suite over 2 pytest-xdist workers, one file per worker
# at a time (`--dist loadfile`, so module fixtures are built once): on the 2-core AMD EPYC it took
# 14 min 54 s against about 20 min 40 s in one process (2026-11-26). JAXRL_TEST_WORKERS=1 runs it
# in one process; a run with a marker or paths (`-m slow`, a file) runs in one process unless it
# passes `-n` itself. The slowest 15 tests are listed at the end of every run. (A process once
# segfaulted in an XLA:CPU compile ~94% through: every compiled
# program's code pages stayed mapped until the process hit vm.max_map_count; tests/conftest.py
# now drops compiled programs when the mapping count passes half the limit and prints the count
# at the end.)
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup_env.sh" "dev,peers,gemma,tpu"
set +e  # setup_env.sh sets -e
cd "$ROOT"
export JAXRL_REQUIRE_TPU=1
workers="${JAXRL_TEST_WORKERS:-2}"
previous=""
for arg in "$@"; do
  if [[ "$arg" != -* && -e "$arg" ]]; then  # explicit paths: as asked
    exec python -m pytest -q -rs --durations=15 "$@"
  fi
  # `-m heavy` (whole tiny runs, tests/heavy.py) keeps the two workers; other markers run alone
  if [[ "$previous" == -m && "$arg" != heavy ]] || [[ "$arg" == -m?* && "$arg" != -mheavy ]] \
     || [[ "$arg" == -n* || "$arg" == --numprocesses* ]]; then
    workers=1
  fi
  previous="$arg"
done
if [ "$workers" -gt 1 ]; then
  exec python -m pytest -q -rs --durations=15 -n "$workers" --dist loadfile tests "$@"
fi
exec python -m pytest -q -rs --durations=15 tests "$@"
