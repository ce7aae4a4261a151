"""Data: Interactions (validated events + vocabularies), filters, split protocols and
`prepare_data` (source -> filters -> split, cached). Readers live in `linrec.data.sources`."""

from linrec.data.filters import apply_filters, binarize, kcore
from linrec.data.interactions import Interactions, PredefinedSplitData
from linrec.data.pipeline import PreparedData, prepare_data
from linrec.data.splits import (
    EvalSet,
    Split,
    holdout,
    leave_one_out,
    predefined,
    strong_generalization,
)

__all__ = [
    "EvalSet",
    "Interactions",
    "PredefinedSplitData",
    "PreparedData",
    "Split",
    "apply_filters",
    "binarize",
    "holdout",
    "kcore",
    "leave_one_out",
    "predefined",
    "prepare_data",
    "strong_generalization",
]
