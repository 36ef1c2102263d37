import graphbook as gb
from custom_nodes.pokemon_nodes import (
    LoadImageDataset,
    PokemonClassifier,
    ViTForImageClassificationResource,
    ViTImageProcessorResource,
)

g = gb.Graph()


@g()
def _():
    g.md(
        """# Pokemon Classification

Classifies the Pokemon images of a folder (examples/workflows/python/Pokemon.py in shape: nodes
imported from custom_nodes, the built-in Split with a Function resource, model resources).
"""
    )

    # Create nodes
    step_0 = g.step(LoadImageDataset)
    step_1 = g.step(PokemonClassifier)
    resource_2 = g.resource(gb.resources.FunctionResource)
    step_3 = g.step(gb.steps.Split)
    resource_4 = g.resource(ViTForImageClassificationResource)
    resource_5 = g.resource(ViTImageProcessorResource)

    # Setup parameters
    step_0.param("image_dir", "pokemon")
    step_1.param("batch_size", 2)
    step_1.param("item_key", "image")
    step_1.param("model", resource_4)
    step_1.param("image_processor", resource_5)
    resource_2.param(
        "val",
        """def my_favorite_pokemon(note: dict) -> bool:
        return note["name"] in ["Pikachu", "Charmander", "Bulbasaur"]""",
    )
    step_3.param("split_fn", resource_2)
    resource_4.param("model_name", "local/pokemon_classifier")
    resource_5.param("image_processor", "local/pokemon_classifier")

    # Bind steps
    step_1.bind(step_3, "A")
    step_3.bind(step_0, "out")


if __name__ == "__main__":
    g.run()
