r"""spark-submit entry point for ``leakcheck-spark clean``.

    PYSPARK_DRIVER_PYTHON=python PYSPARK_PYTHON=./environment/bin/python \
    spark-submit --master spark://HOST:7077 --archives leakcheck-env.tar.gz#environment \
        jobs/clean.py --test diversevul:test=s3a://bucket/dv_test.jsonl \
        --against primevul:train=s3a://bucket/pv_train.jsonl --text-field func \
        --out s3a://bucket/dv_test_clean.jsonl --report s3a://bucket/dv_test_clean.report.json

The environment is set up as for ``jobs/audit.py`` (README, "Running on a cluster").
"""

import sys

from leakcheck_spark.cli import job

sys.exit(job("clean"))
