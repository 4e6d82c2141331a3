#!/usr/bin/env python3
"""qattn.verify (python/qattn/verify.py) from the source tree, for the GPU suites:

    python3 tests/gpu/verify.py OUT_DIR [--only REGEX] [--seed N]

(the same as `PYTHONPATH=python python3 -m qattn.verify ...`; `qattn generate` runs the module)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from qattn.verify import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
