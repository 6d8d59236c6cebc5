"""``python -m clusterbench.config FILE ...``: check config files as the workflow would (see
:func:`clusterbench.config.main`)."""

import sys

from clusterbench.config import main

if __name__ == "__main__":
    sys.exit(main())
