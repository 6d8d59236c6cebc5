"""``python -m clusterbench.status``: see :mod:`clusterbench.status.cli`."""

import sys

from clusterbench.status.cli import main

if __name__ == "__main__":
    sys.exit(main())
