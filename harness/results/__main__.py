"""`python -m harness.results <sweep dir>`: (re)build a sweep's results.csv."""

import sys

from harness.results.table import main

if __name__ == "__main__":
    sys.exit(main())
