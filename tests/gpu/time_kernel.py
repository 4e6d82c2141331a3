#!/usr/bin/env python3
"""qattn.timing (python/qattn/timing.py) from the source tree, for the GPU suites:

    python3 tests/gpu/time_kernel.py ARTIFACTS_DIR [--seqlen 4096] [--tokens 16384]

(the same as `PYTHONPATH=python python3 -m qattn.timing ...`; `qattn generate` runs the module)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from qattn.timing import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
