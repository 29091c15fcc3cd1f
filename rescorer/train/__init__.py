"""rescorer train: settings (config), data and the held-out split (data), the resume state
(state) and the training loop (loop)."""
