"""What a researcher looks at: attention weights from the model's own forward pass, their
heatmaps and line views, the self-contained HTML page, and `--mode=attention`."""
