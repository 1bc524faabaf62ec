import sys

from harness.plan.cli import main

sys.exit(main())
