"""``python -m canopy.cli``: the client verbs (without ``canopy serve``, which the
``canopy`` console script adds)."""

import sys

from canopy.cli import main

sys.exit(main())
