"""linrec: linear recommenders and the evaluation of recommenders."""

__version__ = "0.1.0"
