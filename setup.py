"""Installs ``dagster_graphbook_alias.pth`` next to the package (wheel and editable installs).

The ``.pth`` file makes ``import graphbook`` resolve to dagster-graphbook's API in every Python of
the environment when real Graphbook is not installed (see
``dagster_graphbook/authoring/graphbook_finder.py``). Everything else is in pyproject.toml.
"""

import os

from setuptools import setup
from setuptools.command.build_py import build_py

PTH = "dagster_graphbook_alias.pth"


class BuildPyWithPth(build_py):
    """build_py that also puts the ``.pth`` file at the root of the wheel (site-packages)."""

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            # editable wheels take their root files from the unpacked wheel dir (install_lib)
            target = self.get_finalized_command("install").install_lib
        else:
            target = self.build_lib
        self.copy_file(PTH, os.path.join(target, PTH), preserve_mode=False)

    def get_outputs(self, include_bytecode=1):
        return super().get_outputs(include_bytecode) + [os.path.join(self.build_lib, PTH)]


setup(cmdclass={"build_py": BuildPyWithPth})
