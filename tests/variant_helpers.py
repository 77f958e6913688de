"""A model variant as a user writes one, in a Python file of their own: examples/variants.py
(README "Change the model"), whose `swiglu(cfg) -> Transformer` the tests of
`--config.model` write into a temporary folder and import from there."""

import pathlib

SWIGLU_MODULE = (pathlib.Path(__file__).resolve().parents[1] / 'examples' /
                 'variants.py').read_text()
