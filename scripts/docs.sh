#!/usr/bin/env bash
# The documentation site: sets up .venv with the docs extra, then builds mkdocs.yml with --strict
# into a temporary directory (or DOCS_SITE_DIR), so a broken link, a malformed docstring or a
# public name without a docstring fails. `.venv/bin/mkdocs serve` previews the site locally.
# Extra arguments go to `mkdocs build`.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup_env.sh" "docs"
set +e  # setup_env.sh sets -e
cd "$ROOT"
export NO_MKDOCS_2_WARNING=1  # the theme's banner about a future mkdocs 2
site="${DOCS_SITE_DIR:-$(mktemp -d)}"
start=$(date +%s)
python -m mkdocs build --strict --site-dir "$site" "$@"
rc=$?
echo "[docs] mkdocs build --strict: exit $rc in $(( $(date +%s) - start ))s"
if [ -n "${DOCS_SITE_DIR:-}" ]; then echo "[docs] the site is in $site"; else rm -rf "$site"; fi
exit $rc
