"""
`pip install ./flce/python` after `make lib`: the package is installed with a copy of the
library that build ran (build/libflce.so at the repository's root), so that the installed binding
finds it without $FLCE_LIBRARY (flce/_lib.py looks next to itself last). Without a built library
the package installs alone and says so; it then needs $FLCE_LIBRARY. The metadata is in
pyproject.toml.
"""
import os
import shutil
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
BUILT = os.path.join(HERE, "..", "..", "build", "libflce.so")


class BuildPyWithLibrary(build_py):
    def run(self):
        super().run()
        dest = os.path.join(self.build_lib, "flce", "libflce.so")
        src = os.environ.get("FLCE_LIBRARY") or BUILT
        if os.path.isfile(src):
            shutil.copyfile(src, dest)
            print("flce: installing %s with the package" % os.path.normpath(src))
        elif not os.path.isfile(dest):
            print("flce: no %s (run `make lib` first): the package installs without the library and "
                  "needs $FLCE_LIBRARY" % os.path.normpath(src), file=sys.stderr)


setup(cmdclass={"build_py": BuildPyWithLibrary})
