"""One report for learning runs: held-out accuracy over seeds with 95% intervals, as text,
Markdown and a PNG of the held-out curves.

    python -m jaxrl_llm.report runs/seeds/main_job [more dirs] [--out docs/reports/main_job]
    python -m jaxrl_llm.report.check             # every committed report regenerates

The modules, in the order a report is made:
  loading: the runs read from their directories, grouped, and their records kept.
  rules: the per-run pieces of the rule a new default must meet (shared with the sweep pruner).
  start: `--start_from`, a "before" taken from another run.
  summary: each group's row (before, after, gain, drops, entropy, hacks), `--against`, the curves.
  sides: the side of the split and the scorer a report's figures come from.
  choice: `--choose_across`, the default chosen among a sweep's settings.
  metrics: `--metric`, a training-stream metric's start and end per group.
  tables: the Markdown of all the above.
  cli: the command line (`python -m jaxrl_llm.report`, options in its docstring).
  check: `python -m jaxrl_llm.report.check`, each report in docs/reports rebuilt and compared.

`check` is not imported here, so that `python -m jaxrl_llm.report.check` runs it only once.
"""

from jaxrl_llm.report import choice, cli, loading, metrics, rules, sides, start, summary, tables
from jaxrl_llm.report.cli import build_parser, main
from jaxrl_llm.report.loading import Group, Run, collect_groups, keep_records, load_run
from jaxrl_llm.report.summary import compare, family_confidence, summarize
from jaxrl_llm.report.tables import choice_markdown, markdown

__all__ = [
    "Group",
    "Run",
    "build_parser",
    "choice",
    "choice_markdown",
    "cli",
    "collect_groups",
    "compare",
    "family_confidence",
    "keep_records",
    "load_run",
    "loading",
    "main",
    "markdown",
    "metrics",
    "rules",
    "sides",
    "start",
    "summarize",
    "summary",
    "tables",
]
