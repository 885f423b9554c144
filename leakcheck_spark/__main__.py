"""``python -m leakcheck_spark``."""

import sys

from leakcheck_spark.cli import main

sys.exit(main())
