"""``python -m connectors.ops``: the operations CLI (see :mod:`connectors.ops`)."""

import sys

from connectors.ops import main

if __name__ == "__main__":
    sys.exit(main())
