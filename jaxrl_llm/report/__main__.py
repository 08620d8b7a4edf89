"""`python -m jaxrl_llm.report`: the report's command line (`jaxrl_llm.report.cli`)."""

import sys

from jaxrl_llm.report.cli import main

sys.exit(main())
