"""Installs the pure-Python qattn package (`pip install ./python` from the repository root).

The one thing this adds to pyproject.toml: the installed package remembers the repository it was
installed from (qattn/_install.json in the built package, never in the source tree), so that it
finds <repo>/build/qattn and the device runtime headers (QATTN_HOME) from anywhere.
"""
import json
import os

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


class BuildPy(build_py):
    def run(self):
        super().run()
        repo = os.path.dirname(HERE)
        if os.path.isfile(os.path.join(repo, "include", "qattn", "qattn.h")):
            path = os.path.join(self.build_lib, "qattn", "_install.json")
            with open(path, "w") as f:
                json.dump({"repo": repo}, f)


setup(cmdclass={"build_py": BuildPy})
