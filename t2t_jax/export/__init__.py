"""Export a trained run for serving: CTranslate2 models and StableHLO artifacts.

`common` is what the exporters share (the output directory rule, `ExportSource`);
`ctranslate2_export` (+ `ctranslate2_decoding`) and `stablehlo_export` build on it (the
StableHLO artifact from a workdir, `export_stablehlo`, or from a model, its parameters and
vocabulary in memory, `export_stablehlo_model`);
`formats` dispatches `--mode=export` to them.
"""
