"""rescorer: the RNN Encoder-Decoder phrase scorer of Cho et al. (2014) for Moses phrase tables."""

__version__ = "0.1.0"

__all__ = ["__version__"]
