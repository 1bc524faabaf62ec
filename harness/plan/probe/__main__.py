import sys

from harness.plan.probe.cli import main

if __name__ == "__main__":
    sys.exit(main())
