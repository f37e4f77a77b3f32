import sys

from tuning.harness.cli import main

sys.exit(main())
