#!/usr/bin/env python
"""The frontend: start learners and actors from a CSV of hosts (see README.md).

  python run_experiment_mm_raw.py --workers_csv_path=sandbox/local_workers_example.csv \
      --level_name=BreakoutNoFrameskip-v4 --agent_name=SimpleConvNetAgent ...
  tmux attach -t impala
"""

import sys

from impala.cli import frontend_main

if __name__ == "__main__":
    sys.exit(frontend_main())
