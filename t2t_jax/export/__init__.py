"""Export a trained model for serving: CTranslate2 models and StableHLO artifacts.

`common` is what the exporters share (the output directory rule, `ExportSource`);
`self_check` is how every export proves itself (the written artifact translates a few
sentences as the model's beam search, or nothing is kept);
`ctranslate2_export` (+ `ctranslate2_params`: what the parameter tree says, read as CTranslate2
needs it; `ctranslate2_decoding`) and `stablehlo_export` build on them (the StableHLO artifact
from a workdir, `export_stablehlo`, or from a model, its parameters and vocabulary in memory,
`export_stablehlo_model`);
`formats` dispatches `--mode=export` to them.
"""
