from graphbook.core.steps import Step


class Helper(Step):
    def on_data(self, data):
        data["helper"] = "b"
