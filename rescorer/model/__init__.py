"""The model: the paper's encoder-decoder (encdec) and the model directory (checkpoint)."""
