"""Typed configs of the `eval` block: exact metrics at every K, the selection metric, and the
sampled block with its estimators (Li et al. 2020, §2.1; Li et al. 2023, Tables 1–11)."""

from __future__ import annotations

from dataclasses import dataclass, field

from linrec.errors import ConfigError
from linrec.eval._checks import POOLS, check_foldin_pool
from linrec.eval.metrics import CURVE_METRICS, EXACT_METRICS, parse_metric_key, resolve_selection
from linrec.params import Params, param


def _fixed_size_estimators() -> tuple[str, ...]:
    """The registered fixed-size estimators, read when a config is checked: registering the
    configs (`linrec --help`) imports no estimator, nor scipy."""
    from linrec.eval.estimators.registry import fixed_size_estimators

    return fixed_size_estimators()


def _adaptive_estimators() -> tuple[str, ...]:
    """The registered estimators of adaptive sampling, read when a config is checked."""
    from linrec.eval.estimators.registry import adaptive_estimators

    return adaptive_estimators()


#: how the sampled ranks of the fixed-size settings are obtained
SAMPLING_METHODS = ("sample", "simulate")


@dataclass
class AdaptiveConfig(Params):
    """eval.sampled.adaptive: adaptive (doubling) sampling, simulated from the global ranks
    (Li et al. 2023, Algorithm 1, exact in distribution, docs/concepts/sampled.md); no estimators =
    no adaptive setting."""

    where = "eval.sampled.adaptive"

    estimators: tuple[str, ...] = param(("adaptive_mle",), choices=_adaptive_estimators,
                                        doc="estimators of the adaptive setting (none: no "
                                            "adaptive setting)")
    n0: int = param(100, ge=2, doc="initial set size (target included)")
    n_max: int = param(3200, ge=2, doc="largest set size, n0·2^t")


@dataclass
class SampledConfig(Params):
    """eval.sampled: item-sampled ranks of every held-out item at each sample size, `repeats`
    seeded sample sets each, every estimator on every set, and their errors against the exact
    target-level metrics.

    method: "sample" draws real sampled items and ranks them with the model's scores inside the
    evaluator's pass; "simulate" draws the sampled ranks from their exact law given the global
    ranks (docs/concepts/sampled.md; research use, pool all_but_target only)."""

    where = "eval.sampled"

    enabled: bool = param(True, doc="compute the sampled block")
    method: str = param("sample", choices=SAMPLING_METHODS,
                        doc="sample: real sampled items scored by the model; simulate: sampled "
                            "ranks drawn from their law")
    sample_sizes: tuple[int, ...] = param((100,), ge=2, doc="n: the target plus n-1 sampled")
    replace: bool = param(True, doc="true: binomial scheme, false: hypergeometric")
    pool: str = param("all_but_target", choices=POOLS,
                      doc="what sampled items are drawn from (given: the dataset's own "
                          "negatives)")
    repeats: int = param(10, ge=1, doc="independent sample sets per size")
    seed: int = param(0, ge=0, doc="seed of the sampling (the run seed in configs)")
    estimators: tuple[str, ...] = param(("naive", "bv", "mle", "mn_mle"),
                                        choices=_fixed_size_estimators,
                                        doc="estimators of the fixed-size settings")
    metrics: tuple[str, ...] = param(("recall", "ndcg", "ap"), choices=CURVE_METRICS,
                                     doc="metrics of the curves T@1..k_max")
    k_max: int = param(50, ge=1, doc="curves T@1..k_max; ARE over K = 1..k_max")
    adaptive: AdaptiveConfig = field(default_factory=AdaptiveConfig)

    def check(self) -> None:
        if not self.sample_sizes:
            raise ConfigError("eval.sampled.sample_sizes is empty; give at least one size, "
                              "e.g. [100]")
        if self.method == "simulate" and self.pool != "all_but_target":
            raise ConfigError(f"eval.sampled.method=simulate draws from the law of pool "
                              f"all_but_target; got pool={self.pool!r}")
        if self.pool == "given" and len(self.sample_sizes) != 1:
            raise ConfigError("eval.sampled.pool=given has one fixed sample set per user (the "
                              "dataset's negatives): give one sample size, e.g. [100]")

    def settings(self) -> list[str]:
        """Labels of the sampled settings: 'n=<size>' per sample size, then 'adaptive'."""
        labels = [f"n={n}" for n in self.sample_sizes] if self.estimators else []
        return labels + (["adaptive"] if self.adaptive.estimators else [])


#: what the validation metric of a trainer is computed from
VALIDATION_METHODS = ("exact", "sampled")


@dataclass
class ValidationConfig(Params):
    """eval.validation: the metric a trainer selects epochs and drives its schedule on. exact:
    `eval.selection` on the validation users, every item ranked; sampled: its target-level
    value estimated from the ranks of each held-out item among n − 1 items sampled once
    (seeded by the run seed), by `estimator` (linrec/eval/sampled_validation.py); with
    `adaptive_mle` a target ranked first among its n items is ranked again among twice as many,
    up to `n_max` (adaptive sampling, Li et al. 2023, Algorithm 1)."""

    where = "eval.validation"

    method: str = param("exact", choices=VALIDATION_METHODS,
                        doc="exact (rank every item) | sampled (estimate from sampled ranks)")
    estimator: str = param("mn_mle",
                           choices=lambda: _fixed_size_estimators() + _adaptive_estimators(),
                           doc="the estimator of method=sampled")
    sample_size: int = param(100, ge=2, doc="n of method=sampled: the target plus n-1 sampled "
                                            "(adaptive_mle: the first set size n0)")
    replace: bool = param(True, doc="method=sampled: with replacement (binomial) or without")
    n_max: int = param(3200, ge=2, doc="estimator=adaptive_mle: the largest set size, "
                                       "sample_size·2^t")

    def check(self) -> None:
        ratio = self.n_max // self.sample_size
        # the registry is read only when the sizes do not double (not for the defaults)
        if (self.n_max % self.sample_size or ratio & (ratio - 1)) and \
                self.estimator in _adaptive_estimators():
            raise ConfigError(f"eval.validation.n_max={self.n_max} must be "
                              f"eval.validation.sample_size={self.sample_size} times a power "
                              "of 2 (adaptive sampling doubles the set)")


@dataclass
class EvalConfig(Params):
    """eval: exact metrics at every K, the selection metric returned to sweepers, the batch
    memory budget, the splits to score and the sampled block."""

    where = "eval"

    ks: tuple[int, ...] = param((1, 5, 10, 20, 50, 100), ge=1,
                                doc="cut-offs K of the exact metrics")
    metrics: tuple[str, ...] = param(EXACT_METRICS, choices=EXACT_METRICS,
                                     doc="exact metrics to compute")
    selection: str = param("ndcg@100", doc="<metric>@<K> (K lowered to n_items if larger)")
    memory_budget_mb: int = param(512, gt=0, doc="score matrix budget per batch")
    splits: tuple[str, ...] = param(("valid", "test"), choices=("valid", "test"),
                                    doc="splits to evaluate")
    exclude_foldin: bool = param(True, doc="true: a user's fold-in (training) items are not "
                                           "ranked; false: they compete with the held-out items "
                                           "among all items (Li et al. 2020's binom/hyper "
                                           "protocol)")
    validation: ValidationConfig = field(default_factory=ValidationConfig)
    save_per_user: bool = param(False, doc="write per_user_<split>.parquet: a row per user and "
                                           "exact metric (needs pyarrow: linrec[parquet])")
    sampled: SampledConfig = field(default_factory=SampledConfig)

    def check(self) -> None:
        if self.save_per_user:
            try:
                import pyarrow.parquet  # noqa: F401
            except ImportError as exc:
                raise ConfigError("eval.save_per_user=true writes Parquet, which needs pyarrow: "
                                  "pip install 'linrec[parquet]'") from exc
        if not self.ks:
            raise ConfigError("eval.ks is empty; give at least one cut-off K >= 1")
        check_foldin_pool(self.exclude_foldin, self.sampled.pool)
        if not self.metrics:
            raise ConfigError(f"eval.metrics is empty; choose from {list(EXACT_METRICS)}")
        name, k = parse_metric_key(self.selection, where="eval.selection")
        if self.validation.method == "sampled" and (name not in CURVE_METRICS or k is None):
            raise ConfigError(f"eval.validation.method=sampled estimates eval.selection from "
                              f"sampled ranks, which {self.selection} cannot be; choose one of "
                              f"{list(CURVE_METRICS)} at a K (e.g. eval.selection=recall@20)")

    def ks_for(self, n_items: int) -> tuple[int, ...]:
        """The configured K that the catalogue allows (K <= n_items), plus the selection K."""
        ks = {k for k in self.ks if k <= n_items}
        _, selection_k = parse_metric_key(resolve_selection(self.selection, n_items))
        if selection_k is not None:
            ks.add(selection_k)
        if not ks:
            raise ConfigError(f"eval.ks={list(self.ks)}: no K <= n_items={n_items}")
        return tuple(sorted(ks))
