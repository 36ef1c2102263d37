"""A step that writes what started its process: the parent's command line, then its memory map
(which process a step process forked from, and what that one had loaded)."""

import os

from graphbook import param, source, step


@step("P/Parent")
@source()
@param("out", "string")
def parent(ctx):
    with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
        cmd = f.read().replace(b"\0", b" ").decode()
    with open(f"/proc/{os.getppid()}/maps") as f:
        mapped = f.read()
    with open(ctx.out, "w") as f:
        f.write(cmd + "\n" + mapped)
    yield {"out": {"pid": os.getpid()}}
