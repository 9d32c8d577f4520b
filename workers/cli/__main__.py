"""`python -m workers.cli run WORKLOAD [key=value ...] [options]`: `boundary run`."""

from __future__ import annotations

import sys

from workers.cli.run import EXIT_BAD_JOB, run_command

if len(sys.argv) < 2 or sys.argv[1] != "run":
    print("usage: python -m workers.cli run WORKLOAD [key=value ...] [options]", file=sys.stderr)
    sys.exit(EXIT_BAD_JOB)
sys.exit(run_command(sys.argv[2:]))
