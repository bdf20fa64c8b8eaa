"""``python -m circuitwidgets``: the same commands as the ``circuitwidgets`` console script."""

import sys

from circuitwidgets.cli import main

sys.exit(main())
