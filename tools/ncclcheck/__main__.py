"""`python -m tools.ncclcheck`: see cli.py."""

import sys

from tools.ncclcheck.cli import main

sys.exit(main())
