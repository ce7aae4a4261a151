"""Which part of a run's record (results.json) its figures read: the figures of the test split
(else the first split), the selection metric and the training log. Both the drawing
(`linrec.plots.run_figure_jobs`) and the figure process (`linrec.figure_process`, which is sent
that part before the run's other splits are scored) go through here, so that the part sent
ahead and the whole record give the same figures."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def figure_split(split_names: Iterable[str]) -> str | None:
    """The split whose sampled settings a run's figures show: test, else the first."""
    names = list(split_names)
    return "test" if "test" in names else next(iter(names), None)


def figure_inputs(record: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a results.json record that a run's figures read (`plots.run_figure_jobs`
    draws from it alone): the figure split's sampled settings, the selection metric and the
    training log. The same for a record of the figure split alone as for the whole run's, so
    a run can have its figures drawn before its other splits are scored."""
    splits = record.get("splits") or {}
    name = figure_split(splits)
    inputs: dict[str, Any] = {
        "splits": {} if name is None else {name: {"sampled": splits[name].get("sampled")}},
        "training": record.get("training")}
    selection = record.get("selection") or {}
    if "metric" in selection:
        inputs["selection"] = {"metric": selection["metric"]}
    return inputs
