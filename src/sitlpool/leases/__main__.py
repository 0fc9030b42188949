"""``python -m sitlpool.leases status [--json]``"""

import sys

from ._report import main

if __name__ == "__main__":
    sys.exit(main())
