r"""spark-submit entry point for any ``leakcheck-spark`` command, named first as on the command
line (``jobs/audit.py`` and ``jobs/clean.py`` are this with the command fixed):

    PYSPARK_DRIVER_PYTHON=python PYSPARK_PYTHON=./environment/bin/python \
    spark-submit --master spark://HOST:7077 --archives leakcheck-env.tar.gz#environment \
        jobs/leakcheck.py resplit -d pv:train=s3a://bucket/pv_train.jsonl \
        -d pv:test=s3a://bucket/pv_test.jsonl --text-field func --out s3a://bucket/pv_splits

The environment is set up as for ``jobs/audit.py`` (README, "Running on a cluster").
"""

import sys

from leakcheck_spark.cli import job

sys.exit(job(None))
