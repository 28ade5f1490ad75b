#!/usr/bin/env python
"""Every role of a run: `--job_name=learner|actor|local`, `--mode=train|test|video`.

See README.md; `python experiment.py --help` lists the flags.
"""

import sys

from impala.cli import experiment_main

if __name__ == "__main__":
    sys.exit(experiment_main())
