"""Graphbook node files the tests run (steps and resources as users write them), one module per
theme. Tests copy a module into their temporary folder (tests/support/nodes.py's
``copy_nodes``) and point the workflow there; no module here starts with ``test_``, so pytest
collects none of them."""
