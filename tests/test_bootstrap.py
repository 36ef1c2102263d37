"""scripts/bootstrap.sh installs with uv, which reads no pip configuration: scripts/uv_args.py
gives uv what pip is configured with, so both install from the same places under the same caps."""

from __future__ import annotations

import importlib.util
import os
import shlex
import subprocess
import sys

from tests.support.paths import REPO

SCRIPT = REPO / "scripts" / "uv_args.py"


def test_uv_is_given_pips_indexes_find_links_and_constraints():
    spec = importlib.util.spec_from_file_location("uv_args", SCRIPT)
    assert spec is not None and spec.loader is not None
    uv_args = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(uv_args)
    settings = {
        "index-url": "https://mirror.example/simple",
        "extra-index-url": "file:///opt/a/simple file:///opt/b/simple",
        "find-links": "/opt/wheels",
        "constraint": "/etc/caps.txt",
        "cert": "/etc/ca.pem",
        "timeout": "60",
    }
    assert uv_args.uv_options(settings) == [
        "--index-strategy", "unsafe-best-match",
        "--index-url", "https://mirror.example/simple",
        "--extra-index-url", "file:///opt/a/simple",
        "--extra-index-url", "file:///opt/b/simple",
        "--find-links", "/opt/wheels",
        "-c", "/etc/caps.txt",
    ]  # fmt: skip


def test_pip_variables_and_certificate_are_read_as_pip_takes_them():
    environ = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    environ.update(
        PIP_CONFIG_FILE=os.devnull,  # pip then reads no configuration file
        PIP_EXTRA_INDEX_URL="file:///opt/a/simple file:///opt/b/simple",
        PIP_FIND_LINKS="/opt/wheels",
        PIP_CERT="/etc/ca.pem",
    )
    out = subprocess.run(
        [sys.executable, str(SCRIPT)], capture_output=True, text=True, check=True, env=environ
    ).stdout
    options, cert = out.split("\n")[:2]
    assert shlex.split(options) == [
        "--index-strategy", "unsafe-best-match",
        "--extra-index-url", "file:///opt/a/simple",
        "--extra-index-url", "file:///opt/b/simple",
        "--find-links", "/opt/wheels",
    ]  # fmt: skip
    assert cert == "/etc/ca.pem"
