"""examples/workflows/functional/data_labeling's node file in shape: two @prompt steps (a
human labels images in the UI) and a model step. The workflow runs the model step only: the
prompt steps wait for a human, which a Dagster run has not. The model's random draw is replaced
by a fixed sequence so the run is reproducible.
"""

from graphbook import prompt, source, step
from graphbook.prompts import bool_prompt, selection_prompt

DRAWS = [0.9, 0.3, 0.55, 0.1]


def dog_or_cat(ctx, data):
    return selection_prompt(data, choices=["dog", "cat"], show_images=True)


@step("Prompts/Label")
@prompt(dog_or_cat)
def label_images(ctx, data, response: str):
    data["label"] = response


def corrective_prompt(ctx, data):
    if data["prediction_confidence"] < 0.65:
        return bool_prompt(
            data,
            msg=f"Model prediction ({data['pred']}) was uncertain. Is its prediction correct?",
            show_images=True,
        )
    return None


@step("Prompts/CorrectModelLabel")
@prompt(corrective_prompt)
def correct_model_labels(ctx, data, response: bool):
    if response:
        data["label"] = data["pred"]
    else:
        data["label"] = "cat" if data["pred"] == "dog" else "dog"


@step("Prompts/Images")
@source()
def images(ctx):
    for i in range(len(DRAWS)):
        yield {"out": {"image": {"type": "image", "value": f"pet{i}.png"}, "i": i}}


@step("Prompts/Model")
def model_prediction(ctx, data):
    sample = DRAWS[data["i"]]
    conf = sample
    if sample < 0.5:
        data["pred"] = "cat"
        conf = 1 - sample
    else:
        data["pred"] = "dog"
    data["prediction_confidence"] = conf
