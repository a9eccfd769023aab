"""``python -m spanspec.cli``."""

import sys

from spanspec.cli import main

sys.exit(main())
