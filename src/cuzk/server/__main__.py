"""``python -m cuzk.server CONFIG.json``: the engine process the supervisor starts."""

import sys

from .daemon import main

sys.exit(main())
