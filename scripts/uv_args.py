"""uv's options for what pip is configured with: ``uv pip install`` reads no pip configuration.

Prints two lines: the options (shell-quoted) and pip's certificate file (empty when none). Each
setting is the last value ``pip config list`` prints for it (configuration files, then PIP_*
variables, as pip itself takes them); every index is searched for the best version, as pip does.
"""

from __future__ import annotations

import ast
import shlex
import subprocess
import sys
from typing import Dict, List


def pip_settings() -> Dict[str, str]:
    listed = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=True
    ).stdout
    settings = {}
    for line in listed.splitlines():
        key, _, value = line.partition("=")
        settings[key.rsplit(".", 1)[-1]] = ast.literal_eval(value)
    return settings


def uv_options(settings: Dict[str, str]) -> List[str]:
    options = ["--index-strategy", "unsafe-best-match"]
    if settings.get("index-url"):
        options += ["--index-url", settings["index-url"]]
    for flag, key in (
        ("--extra-index-url", "extra-index-url"),
        ("--find-links", "find-links"),
        ("-c", "constraint"),
    ):
        for value in settings.get(key, "").split():
            options += [flag, value]
    return options


if __name__ == "__main__":
    settings = pip_settings()
    print(shlex.join(uv_options(settings)))
    print(settings.get("cert", ""))
