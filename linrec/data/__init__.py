"""Data: Interactions (validated events + vocabularies), filters, split protocols and
`prepare_data` (source -> filters -> split, cached). Readers live in `linrec.data.sources`.

Its names are imported on first use (`linrec.lazy_exports`)."""

from linrec.lazy_exports import lazy_exports

__all__ = lazy_exports(__name__, {
    "linrec.data.filters": ("apply_filters", "binarize", "kcore"),
    "linrec.data.interactions": ("Interactions", "PredefinedSplitData"),
    "linrec.data.pipeline": ("PreparedData", "prepare_data"),
    "linrec.data.splits": ("EvalSet", "Split", "holdout", "leave_one_out", "predefined",
                           "strong_generalization"),
})
