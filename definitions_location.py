"""The code location as `dg` loads it (``dg check defs``, ``list defs``, ``dev``, ``launch``).

``dg`` points a ``python_module`` at a module that holds a ``Definitions``
(``[tool.dg.project] code_location_target_module`` in pyproject.toml); this one autoloads the
``definitions`` package exactly as ``workspace.yaml`` (``autoload_defs_module``) does, so both
see the same jobs and assets. It lives outside ``definitions/`` so that autoload does not load
it again; its name starts with the project's root module (``definitions``), as ``dg`` requires.
"""

import importlib
import warnings

import dagster as dg

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)  # load_defs: fine for a package
    defs: dg.Definitions = dg.components.load_defs(importlib.import_module("definitions"))
