"""`python -m quorum ...`: the `quorum` command."""

import sys

from quorum.cli import main

sys.exit(main())
