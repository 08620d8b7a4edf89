"""`python -m jaxrl_llm.launch`: the sweep launcher's command line (`jaxrl_llm.launch.cli`)."""

import sys

from jaxrl_llm.launch.cli import main

sys.exit(main())
