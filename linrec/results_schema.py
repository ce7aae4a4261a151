"""The schema of results.json: every key a run record may hold, its type and what it means.

The schema is the one description of the record: the reference page of the documentation is
rendered from it (`schema_markdown`), and the tests check every results.json they produce
against it (`schema_problems`), so a key the code adds or renames without saying so here fails
a test. A key written `<name>` stands for any key (e.g. `<split>`: `valid`, `test`); `pattern`
restricts it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: JSON types by name; "number" admits integers, "null" is None
_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,), "list": (list,), "string": (str,), "boolean": (bool,),
    "integer": (int,), "number": (int, float), "null": (type(None),),
}


@dataclass(frozen=True)
class Key:
    """One key of the record: `name` (`<placeholder>` for any key), `type` ("a|b" for either),
    `doc`, whether it is always present, its children (objects) and, for a placeholder, the
    regular expression its keys match."""

    name: str
    type: str
    doc: str
    required: bool = True
    children: tuple[Key, ...] = ()
    pattern: str | None = None
    open: bool = False  # an object whose contents are not described (the resolved config)

    @property
    def placeholder(self) -> bool:
        return self.name.startswith("<")


def _stats(what: str) -> tuple[Key, ...]:
    return (Key("mean", "number|null", f"mean of {what} over the repeats; null when it "
                "diverged"),
            Key("std", "number|null", f"standard deviation of {what} over the repeats; null "
                "when it diverged"),
            Key("status", "string", "`diverged`: a repeat's value was not finite or (an "
                "estimate) outside [0, 1], so no number is reported", required=False))


_METRIC_AT_K = r"[a-z_]+@\d+"

_SAMPLED = Key("<setting>", "object", "one sampled setting: `n=<size>` per sample size, and "
               "`adaptive`", pattern=r"n=\d+|adaptive", children=(
    Key("protocol", "object", "how the sampled ranks were drawn", children=(
        Key("replace", "boolean", "true: with replacement (binomial law), false: without "
            "(hypergeometric)"),
        Key("pool", "string", "what the sampled items are drawn from (`eval.sampled.pool`)"),
        Key("method", "string", "`sample` (real sampled items scored by the model) or "
            "`simulate` (sampled ranks drawn from their law given the global ranks)"),
        Key("repeats", "integer", "independent sample sets"),
        Key("seed", "integer", "seed of the sampling"),
        Key("n_items", "integer", "catalogue size the estimators assume"),
        Key("n_items_approximate", "boolean", "true when users' pools differ in size and "
            "n_items is their mean"),
        Key("n_targets", "integer", "held-out (user, item) pairs"),
        Key("k_max", "integer", "largest cut-off of the curves"),
        Key("metrics", "list", "metrics of the curves (`recall`, `ndcg`, `ap`)"),
        Key("sample_size", "integer|string", "n (target plus n − 1 sampled items), or "
            "`adaptive`"),
        Key("adaptive", "object", "adaptive sampling's initial and largest set size",
            required=False, children=(Key("n0", "integer", "initial set size"),
                                      Key("n_max", "integer", "largest set size")))),
    ),
    Key("exact", "object", "the exact target-level metrics the estimates are compared with",
        children=(Key("<metric>@<K>", "number", "exact target-level metric at K",
                      pattern=_METRIC_AT_K),)),
    Key("estimators", "object", "one entry per estimator", children=(
        Key("<estimator>", "object", "an estimator (`naive`, `bv`, `mle`, `mn_mle`, ...)",
            children=(
                Key("metrics", "object", "estimates at the reported cut-offs", children=(
                    Key("<metric>@<K>", "object", "the estimate at K", pattern=_METRIC_AT_K,
                        children=(*_stats("the estimate"),
                                  Key("rel_error", "number|null", "(mean − exact) / exact; "
                                      "null when the exact value is 0"))),)),
                Key("are", "object", "average relative error over K = 1..k_max", children=(
                    Key("<metric>", "object", "one curve metric", children=_stats("the ARE")),
                )),
            )),)),
    Key("curves", "object", "mean curves T@1..k_max for the figures", children=(
        Key("<curve>", "object", "`exact` or an estimator", children=(
            Key("<metric>", "list", "k_max values, T@1 first; null at a K where an estimator "
                "diverged"),)),)),
    Key("rank_histogram", "object|null", "counts of the sampled ranks of the first repeat",
        children=(Key("rank", "list", "sampled rank"), Key("count", "list", "how often"))),
    Key("timings", "object", "seconds per estimator", children=(
        Key("<estimator>", "number", "seconds over all repeats"),)),
))

_SPLIT = Key("<split>", "object", "an evaluated split", pattern=r"valid|test", children=(
    Key("n_users", "integer", "users with at least one held-out item"),
    Key("n_targets", "integer", "held-out (user, item) pairs"),
    Key("exact", "object", "exact full-ranking metrics, averaged over users", children=(
        Key("<metric>@<K>", "number", "e.g. `recall@20`, `ndcg@100`", pattern=_METRIC_AT_K,
            required=False),
        Key("auc", "number", "AUC over the whole ranking", required=False))),
    Key("timings", "object", "seconds of the evaluation of this split", children=(
        Key("score", "number", "computing the scores"),
        Key("rank", "number", "ranking the held-out items"),
        Key("hooks", "number", "the sampled block's work inside the pass"),
        Key("metrics", "number", "the metrics from the ranks"),
        Key("total", "number", "the whole split"))),
    Key("sampled", "object", "item-sampled metrics and their estimators", required=False,
        children=(_SAMPLED,)),
))

_DATASET = Key("dataset", "object", "the data as evaluated", children=(
    Key("name", "string", "dataset name (`synthetic`, `lightgcn-gowalla`, ...)"),
    Key("n_users", "integer", "users after filtering"),
    Key("n_items", "integer", "items after filtering"),
    Key("n_interactions", "integer", "interactions after filtering"),
    Key("split_n_items", "integer", "items the split ranks over"),
    Key("n_train_users", "integer", "users in the training matrix"),
    Key("n_train_interactions", "integer", "interactions in the training matrix"),
    *(Key(f"{split}_{what}", "integer", f"{split} split: {doc}", required=False)
      for split in ("valid", "test")
      for what, doc in (("users", "users evaluated"), ("targets", "held-out interactions"),
                        ("foldin", "fold-in interactions given to the model"))),
))

_ENVIRONMENT = Key("environment", "object", "provenance of the process that ran", children=(
    Key("linrec", "object", "linrec itself", children=(
        Key("version", "string", "linrec's version"),
        Key("commit", "string|null", "git commit of the source, when known", required=False),
        Key("dirty", "boolean", "the checkout had uncommitted changes", required=False))),
    Key("created", "string", "when the record was written (ISO 8601, UTC)"),
    Key("python", "string", "Python version"),
    Key("platform", "string", "operating system and machine"),
    Key("hostname", "string", "host name"),
    Key("libraries", "object", "versions of the imported distributions", children=(
        Key("<distribution>", "string", "distribution name: version"),)),
    Key("cpu", "string", "the processor's model name (timings compare on the same kind only)",
        required=False),
    Key("cpu_cores", "integer", "cores available to the process"),
    Key("linrec_threads", "integer", "threads linrec may start ($LINREC_THREADS or the cores)"),
    Key("env_threads", "object", "thread variables set in the environment", children=(
        Key("<variable>", "string", "OMP_NUM_THREADS, OPENBLAS_NUM_THREADS or MKL_NUM_THREADS",
            pattern=r"OMP_NUM_THREADS|OPENBLAS_NUM_THREADS|MKL_NUM_THREADS"),)),
    Key("blas_threads", "list", "the BLAS libraries loaded and their thread counts",
        required=False),
    Key("torch_threads", "integer", "torch's thread count, when torch was used",
        required=False),
    Key("plugins", "list", "the plugins the process loaded: `plugin` (its name in messages), "
        "`spec` (the entry point, module or file that named it), `distribution` and `version` "
        "(an entry point's package)", required=False),
))

_TRAINING = Key("training", "object", "the training log of a model trained by epochs",
                required=False, children=(
    Key("epochs", "list", "one entry per epoch: `epoch`, `loss`, `lr`, the validation metric "
        "(`valid` or `test`) and `seconds`"),
    Key("best_epoch", "integer|null", "the epoch whose parameters were kept"),
    Key("stop_reason", "string", "why training stopped (`epochs`, `early_stopping`, ...)"),
    Key("resumed_from", "integer|null", "the checkpoint epoch training continued from"),
    Key("selected_on", "string", "the split epochs were selected on (`valid` or `test`)"),
    Key("validation", "object", "what measured the epochs (`eval.validation`)", children=(
        Key("method", "string", "`exact` (every item ranked) or `sampled`"),
        Key("metric", "string", "the metric compared between epochs"),
        Key("estimator", "string", "method sampled: the estimator", required=False),
        Key("sample_size", "integer", "method sampled: n, the target and n − 1 sampled items",
            required=False),
        Key("scheme", "string", "method sampled: `binomial` or `hypergeometric`",
            required=False),
        Key("seed", "integer", "method sampled: the seed of the sampled items",
            required=False),
        Key("n_targets", "integer", "method sampled: held-out items ranked per pass",
            required=False),
        Key("passes", "integer", "method sampled: validation passes in this fit (resumed "
            "epochs not counted)", required=False),
        Key("draw_seconds", "number", "method sampled: drawing the sample sets, once",
            required=False),
        Key("seconds_per_pass", "number|null", "method sampled: the mean seconds of a pass",
            required=False),
        Key("n_max", "integer", "estimator adaptive_mle: the largest set size", required=False),
        Key("mean_sample_size", "number|null", "estimator adaptive_mle: the mean set size of "
            "the last pass", required=False),
    ), required=False),
))

#: every key of results.json
RESULTS_SCHEMA = Key("results.json", "object", "one run", children=(
    _DATASET,
    Key("model", "string", "the model's name (`model=<name>`; a scored run file: its label)"),
    Key("splits", "object", "the evaluated splits", children=(_SPLIT,)),
    Key("selection", "object", "the metric returned to sweepers", children=(
        Key("metric", "string", "`eval.selection`, e.g. `ndcg@100`"),
        Key("split", "string", "the split it was read on"),
        Key("value", "number|null", "its value"))),
    Key("timings", "object", "seconds of the run's stages", children=(
        Key("data", "number", "loading the data (or reading the cached split); absent in a "
            "study's runs, which share one loaded dataset", required=False),
        Key("fit", "number", "fitting the model (a scored run file: reading it)"),
        Key("evaluate", "number", "evaluating every split"))),
    _ENVIRONMENT,
    Key("seed", "integer", "the run seed"),
    Key("overrides", "list", "the command-line overrides of the run"),
    Key("config", "object", "the resolved config (`linrec --cfg job --resolve` shows its form)",
        open=True),
    Key("study", "object", "a run that is part of a study", required=False, children=(
        Key("name", "string", "the study"),
        Key("label", "string", "the run's row label"),
        Key("point", "object", "the grid point (dataset and swept values)", open=True))),
    _TRAINING,
    Key("notes", "list", "what the run's numbers leave out and why (a run file's lists cut "
        "short of the catalogue: the cut-offs, AUC and sampled block left out)", required=False),
))


def _type_ok(value: Any, type_names: str) -> bool:
    return any(isinstance(value, _TYPES[t]) and not (t in ("integer", "number")
                                                     and isinstance(value, bool))
               for t in type_names.split("|"))


def _check(value: Any, key: Key, path: str, problems: list[str]) -> None:
    if not _type_ok(value, key.type):
        problems.append(f"{path}: {type(value).__name__} {value!r:.60}, expected {key.type}")
        return
    if not isinstance(value, Mapping) or key.open:
        return
    literal = {k.name: k for k in key.children if not k.placeholder}
    placeholders = [k for k in key.children if k.placeholder]
    for name, child in literal.items():
        if child.required and name not in value:
            problems.append(f"{path}.{name}: missing")
    for name, item in value.items():
        child = literal.get(name) or next(
            (p for p in placeholders if p.pattern is None or re.fullmatch(p.pattern, name)),
            None)
        if child is None:
            problems.append(f"{path}.{name}: not in the schema")
        else:
            _check(item, child, f"{path}.{name}", problems)


def schema_problems(record: Any) -> list[str]:
    """What in `record` (a parsed results.json) the schema does not describe or misses: one
    'path: problem' line each; [] when the record matches."""
    problems: list[str] = []
    _check(record, RESULTS_SCHEMA, "results", problems)
    return problems


def _rows(key: Key, path: str) -> list[tuple[str, Key]]:
    rows = [(path, key)]
    for child in key.children:
        rows += _rows(child, f"{path}.{child.name}" if path else child.name)
    return rows


def schema_markdown() -> str:
    """The schema as a Markdown table: key path, type, always present, meaning."""
    lines = ["| key | type | always | meaning |", "|---|---|---|---|"]
    for path, key in _rows(RESULTS_SCHEMA, "")[1:]:
        doc = key.doc + (f" (keys match `{key.pattern}`)" if key.pattern else "")
        lines.append(f"| `{path}` | {key.type.replace('|', ' or ')} | "
                     f"{'yes' if key.required else 'no'} | {doc.replace('|', '&#124;')} |")
    return "\n".join(lines) + "\n"
