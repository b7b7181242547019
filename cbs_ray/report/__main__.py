"""``python -m cbs_ray.report EXPERIMENT_DIR``: the report command line (``report.command.report_main``, which
``cbs-ray report`` runs too)."""

import sys

from cbs_ray.report.command import report_main

if __name__ == "__main__":
    sys.exit(report_main())
