"""What a researcher looks at: attention maps from the model's own forward pass.

`attention_maps` collects the weights the model sows, `attention_plots` draws heatmaps and
line views, `attention_html` writes the self-contained page, `attention_mode` is
`--mode=attention`.
"""
