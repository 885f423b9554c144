r"""spark-submit entry point for ``leakcheck-spark audit``.

    PYSPARK_DRIVER_PYTHON=python PYSPARK_PYTHON=./environment/bin/python \
    spark-submit --master spark://HOST:7077 --archives leakcheck-env.tar.gz#environment \
        jobs/audit.py -d primevul:train=s3a://bucket/pv_train.jsonl \
        -d diversevul:test=s3a://bucket/dv_test.jsonl --text-field func \
        --out-dir s3a://bucket/leak_report

``leakcheck-env.tar.gz`` is a packed virtualenv holding the wheel and its dependencies, and the
driver's Python has the wheel installed (README, "Running on a cluster").  Not ``--py-files``
with the wheel: Spark puts only .zip, .egg and .py files of ``--py-files`` on the executors'
Python path, and the wheel alone would not bring pandas, pyarrow and datasketch anyway.
"""

import sys

from leakcheck_spark.cli import job

sys.exit(job("audit"))
