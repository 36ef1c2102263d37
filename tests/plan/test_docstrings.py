"""Step docstrings as Dagster descriptions: reStructuredText and Google-style sections become
Markdown."""

from __future__ import annotations

RST_DOC = """Loads a :class:`~torch.nn.Module` with :func:`the loader <pkg.load>`; see
    `the docs <https://example.org/x>`_ and ``model.eval()``.

    Example::

        step = Load(path="m.pt")

    .. note:: slow on
       a CPU.

    .. code-block:: python
       :linenos:

       model = load(``x``)

    Args:
        path (str): where the ``.pt`` file
            is.
        device: ``cpu`` or ``cuda``
    Returns:
        the model
    """


def test_rst_docstrings_become_markdown():
    from dagster_graphbook.plan.docstrings import pin_docs, summary, to_markdown

    assert to_markdown(RST_DOC).splitlines() == [
        "Loads a `Module` with `the loader`; see",
        "[the docs](https://example.org/x) and `model.eval()`.",
        "",
        "Example:",
        "",
        "```",
        'step = Load(path="m.pt")',
        "```",
        "",
        "**Note:** slow on a CPU.",
        "",
        "```python",
        "model = load(``x``)",  # code is left as written
        "```",
        "",
        "**Parameters**",
        "",
        "- **path** (str): where the `.pt` file is.",
        "- **device**: `cpu` or `cuda`",
        "",
        "**Returns**",
        "",
        "the model",
    ]
    assert summary(RST_DOC) == (
        "Loads a `Module` with `the loader`; see [the docs](https://example.org/x) and "
        "`model.eval()`."
    )
    assert pin_docs(RST_DOC) == {}
