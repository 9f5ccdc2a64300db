"""``python -m rmq_spark.cli``: rmq-admin."""

import sys

from rmq_spark.cli import main

sys.exit(main())
