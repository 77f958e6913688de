"""Inference on a trained run: checkpoint averaging, translation (Translator and the portable
fixed-shape decoder), evaluation on a split, BLEU, and the eval/decode/average modes."""
