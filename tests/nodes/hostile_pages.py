"""Nodes of tests/e2e/test_ui_browser.py (HOSTILE_NODES)."""

from graphbook.steps import SourceStep


class Hostile(SourceStep):
    # untrusted notes: captions that are markup, NaN, lists, mixed types
    RequiresInput = False
    Outputs = ["out"]
    Parameters = {"image": {"type": "string", "default": ""}, "port": {"type": "number"}}

    def __init__(self, image="", port=0):
        super().__init__()
        self.image, self.port = image, int(port)

    def load(self):
        note = {
            "image": self.image,
            "script": "<script>z=1</script>",
            "img": f"![x](//127.0.0.1:{self.port})",
            "link": "[a](javascript:z=2)",
            "html": f"<img src=//127.0.0.1:{self.port}>"[:24],
        }
        return {
            "out": [
                {**note, "cls": float("nan"), "tags": [1, 2], "x": "1.5", "long": "<b>" * 40},
                {**note, "cls": 2.0, "tags": [], "x": 2.5, "long": None},
            ]
        }
