"""Two steps that record which process ran them; Check fails while the file `fail_check` exists
beside the code location (a fault to resume from)."""

import os

from graphbook.steps import SourceStep, Step


class Numbers(SourceStep):
    RequiresInput = False
    Outputs = ["out"]
    Parameters = {}

    def load(self):
        return {"out": [{"n": i, "numbers_pid": os.getpid()} for i in range(3)]}


class Check(Step):
    Parameters = {}

    def on_data(self, data):
        if os.path.exists(os.path.join(os.environ["CHECK_DIR"], "fail_check")):
            raise RuntimeError("told to fail")
        data["check_pid"] = os.getpid()
