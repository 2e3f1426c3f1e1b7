"""``python -m dpmm`` runs the ``dpmm`` command."""

import sys

from dpmm.cli import main

sys.exit(main())
