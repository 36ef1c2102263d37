from graphbook.core.steps import Step


class Helper(Step):
    """One of two classes named Helper (as when two example folders are merged)."""

    def on_data(self, data):
        data["helper"] = "a"
