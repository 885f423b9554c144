r"""spark-submit entry point for ``leakcheck-spark clean``.

    spark-submit --master spark://HOST:7077 --py-files dist/leakcheck_spark-0.1.0-py3-none-any.whl \
        jobs/clean.py --test diversevul:test=s3a://bucket/dv_test.jsonl \
        --against primevul:train=s3a://bucket/pv_train.jsonl --text-field func \
        --out s3a://bucket/dv_test_clean.jsonl --report s3a://bucket/dv_test_clean.report.json
"""

import sys

from leakcheck_spark.cli import main

sys.exit(main(["clean", *sys.argv[1:]]))
