"""``python -m cbs_ray.report EXPERIMENT_DIR``: the report command line (``cli.report_main``)."""

import sys

from cbs_ray.cli import report_main

if __name__ == "__main__":
    sys.exit(report_main())
