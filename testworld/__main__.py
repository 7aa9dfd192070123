"""``python -m testworld demo|simulate ...``: the ``joiner`` CLI with the test world's commands
registered directly (no entry-point metadata needed)."""

import sys

from testworld.cli import main

sys.exit(main())
