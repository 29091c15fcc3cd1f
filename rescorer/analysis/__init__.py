"""The paper's analyses (docs/analyses.md): generated phrases (Table 3), the table against the
RNN (Table 2) and the pictures (Figs. 3-5). Uses the model and the scorer; the CLI is
``rescorer sample``, ``compare`` and ``plot``."""
