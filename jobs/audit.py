r"""spark-submit entry point for ``leakcheck-spark audit``.

    spark-submit --master spark://HOST:7077 --py-files dist/leakcheck_spark-0.1.0-py3-none-any.whl \
        jobs/audit.py -d primevul:train=s3a://bucket/pv_train.jsonl \
        -d diversevul:test=s3a://bucket/dv_test.jsonl --text-field func \
        --out-dir s3a://bucket/leak_report
"""

import sys

from leakcheck_spark.cli import main

sys.exit(main(["audit", *sys.argv[1:]]))
