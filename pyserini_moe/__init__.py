"""pyserini-moe: Mixture-of-Experts retrievers as first-class Pyserini encoders."""

__version__ = "0.1.0"
