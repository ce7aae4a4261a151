"""User sampling and significance (Li 2023, §2.7; Li et al. 2020, eqs. 3–5 Hoeffding).

Confidence intervals of a proportion or a mean (with the finite-population correction when users are
drawn without replacement from a finite test set), textbook sample sizes, Hoeffding bounds,
two-model tests (two-proportion z, two-sample t, and the paired tests that suit one set of users:
paired t, McNemar, Wilcoxon signed-rank, sign test), the paired difference with its bootstrap
interval over users, Bonferroni and Holm corrections, and the user-sampling estimate of a metric.
Every test result records which test was used.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy import stats

from linrec.errors import ConfigError, DataError
from linrec.eval.metrics import curve

ALTERNATIVES = ("two-sided", "less", "greater")


@dataclass(frozen=True)
class Interval:
    """A point estimate with a confidence interval [low, high]."""

    estimate: float
    low: float
    high: float
    confidence: float
    method: str

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2.0


@dataclass(frozen=True)
class TestResult:
    """Outcome of a hypothesis test: statistic, p-value, the test's name and alternative."""

    test: str
    statistic: float
    pvalue: float
    alternative: str
    details: dict[str, float] = field(default_factory=dict)

    def reject(self, alpha: float = 0.05) -> bool:
        return self.pvalue < alpha


def _check_confidence(confidence: float) -> None:
    if not 0.0 < confidence < 1.0:
        raise ConfigError(f"confidence={confidence} must be in (0, 1), e.g. 0.95")


def _check_alternative(alternative: str) -> None:
    if alternative not in ALTERNATIVES:
        raise ConfigError(f"alternative={alternative!r} is not supported; choose one of "
                          f"{ALTERNATIVES}")


def _fpc(sample: int, population: int | None) -> float:
    """sqrt((M - m)/(M - 1)): finite-population correction of a standard error (Li 2023, §2.7.1)."""
    if population is None:
        return 1.0
    if int(population) != population or population < max(sample, 2):
        raise ConfigError(f"population_size={population} must be an integer >= the sample size "
                          f"{sample} (and >= 2)")
    return math.sqrt((population - sample) / (population - 1.0))


def critical_value(confidence: float = 0.95, n_comparisons: int = 1,
                   two_sided: bool = True) -> float:
    """z such that a normal interval has the given family-wise confidence over n_comparisons
    Bonferroni-corrected comparisons (Li 2023, §2.7.2): z = Φ^{-1}(1 - α/(2L)) two-sided."""
    _check_confidence(confidence)
    if int(n_comparisons) != n_comparisons or n_comparisons < 1:
        raise ConfigError(f"n_comparisons={n_comparisons} must be a positive integer")
    alpha = (1.0 - confidence) / n_comparisons
    return float(stats.norm.ppf(1.0 - alpha / 2.0 if two_sided else 1.0 - alpha))


def proportion_ci(
    successes: int, n_trials: int, confidence: float = 0.95, population_size: int | None = None
) -> Interval:
    """Wald interval p̂ ± z sqrt(p̂(1-p̂)/m)·FPC of a proportion (Recall/HR, Li 2023, §2.7.1)."""
    if int(n_trials) != n_trials or n_trials < 1 or not 0 <= successes <= n_trials:
        raise ConfigError(f"successes={successes}, n_trials={n_trials}: need 0 <= successes <= "
                          "n_trials and n_trials >= 1")
    p_hat = successes / n_trials
    z = critical_value(confidence)
    half = z * math.sqrt(p_hat * (1.0 - p_hat) / n_trials) * _fpc(n_trials, population_size)
    return Interval(p_hat, p_hat - half, p_hat + half, confidence, "wald")


def mean_ci(
    values: np.ndarray,
    confidence: float = 0.95,
    population_size: int | None = None,
    dist: str = "normal",
) -> Interval:
    """Interval mean ± q·s/sqrt(m)·FPC of per-user values, s the sample standard deviation
    (ddof=1), q the normal ("normal", CLT) or Student-t ("t") quantile (Li 2023, §2.7.1)."""
    values = np.asarray(values, dtype=np.float64).ravel()
    if values.size < 2:
        raise DataError(f"mean_ci needs at least 2 values; got {values.size}")
    if dist not in ("normal", "t"):
        raise ConfigError(f"dist={dist!r} is not supported; choose 'normal' or 't'")
    _check_confidence(confidence)
    q = (critical_value(confidence) if dist == "normal"
         else float(stats.t.ppf(0.5 + confidence / 2.0, df=values.size - 1)))
    mean = float(values.mean())
    half = q * values.std(ddof=1) / math.sqrt(values.size) * _fpc(values.size, population_size)
    return Interval(mean, mean - half, mean + half, confidence, dist)


def sample_size_proportion(
    margin: float,
    confidence: float = 0.95,
    p: float = 0.5,
    n_comparisons: int = 1,
    two_sample: bool = False,
    z: float | None = None,
) -> float:
    """Users needed for margin of error e on a proportion (Li 2023, §2.7.1; §2.7.2):
    m = z² p(1-p)/e² for one model, m = 2 p(1-p)(z/e)² per model for a difference of two.
    z defaults to critical_value(confidence, n_comparisons). Returns the real m (round up)."""
    if not 0.0 < margin < 1.0:
        raise ConfigError(f"margin={margin} must be in (0, 1)")
    if not 0.0 <= p <= 1.0:
        raise ConfigError(f"p={p} must be in [0, 1]")
    z = critical_value(confidence, n_comparisons) if z is None else float(z)
    return (2.0 if two_sample else 1.0) * z * z * p * (1.0 - p) / margin**2


def hoeffding_bound(n_samples: int, t: float) -> float:
    """Pr(|mean - E mean| >= t) <= 2 exp(-2 m t²), m i.i.d. values in [0, 1] (Li et al. 2020, eqs.
    3–5; Li 2023, §2.7.1)."""
    if n_samples < 1 or t <= 0:
        raise ConfigError(f"n_samples={n_samples} must be >= 1 and t={t} > 0")
    return float(min(1.0, 2.0 * math.exp(-2.0 * n_samples * t * t)))


def hoeffding_margin(n_samples: int, delta: float) -> float:
    """t with 2 exp(-2 m t²) = delta: sqrt(log(2/delta)/(2m))."""
    if n_samples < 1 or not 0.0 < delta < 1.0:
        raise ConfigError(f"n_samples={n_samples} must be >= 1 and delta={delta} in (0, 1)")
    return math.sqrt(math.log(2.0 / delta) / (2.0 * n_samples))


def hoeffding_sample_size(t: float, delta: float) -> float:
    """m with 2 exp(-2 m t²) = delta: log(2/delta)/(2 t²) (round up)."""
    if t <= 0 or not 0.0 < delta < 1.0:
        raise ConfigError(f"t={t} must be > 0 and delta={delta} in (0, 1)")
    return math.log(2.0 / delta) / (2.0 * t * t)


def _normal_pvalue(z: float, alternative: str) -> float:
    if alternative == "two-sided":
        return float(2.0 * stats.norm.sf(abs(z)))
    return float(stats.norm.cdf(z) if alternative == "less" else stats.norm.sf(z))


def two_proportion_z(
    successes1: int, n1: int, successes2: int, n2: int, alternative: str = "two-sided"
) -> TestResult:
    """Pooled two-proportion z-test of H0 p1 = p2 (Li 2023, §2.7.2):
    z = (p̂1 - p̂2)/sqrt(p̄ q̄ (1/m1 + 1/m2)). Unpaired (conservative for the same users)."""
    _check_alternative(alternative)
    for s, n in ((successes1, n1), (successes2, n2)):
        if n < 1 or not 0 <= s <= n:
            raise ConfigError(f"successes={s}, n={n}: need 0 <= successes <= n, n >= 1")
    p1, p2 = successes1 / n1, successes2 / n2
    pooled = (successes1 + successes2) / (n1 + n2)
    se = math.sqrt(pooled * (1.0 - pooled) * (1.0 / n1 + 1.0 / n2))
    if se == 0.0:
        return TestResult("two_proportion_z", 0.0, 1.0, alternative, {"diff": p1 - p2})
    z = (p1 - p2) / se
    return TestResult("two_proportion_z", z, _normal_pvalue(z, alternative), alternative,
                      {"diff": p1 - p2})


def difference_ci(
    successes1: int, n1: int, successes2: int, n2: int, confidence: float = 0.95,
    n_comparisons: int = 1,
) -> Interval:
    """(p̂1 - p̂2) ± z sqrt(p̂1(1-p̂1)/m1 + p̂2(1-p̂2)/m2) (Li 2023, §2.7.2), Bonferroni z."""
    p1, p2 = successes1 / n1, successes2 / n2
    z = critical_value(confidence, n_comparisons)
    half = z * math.sqrt(p1 * (1.0 - p1) / n1 + p2 * (1.0 - p2) / n2)
    return Interval(p1 - p2, p1 - p2 - half, p1 - p2 + half, confidence, "wald_difference")


def _paired(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(x, dtype=np.float64).ravel()
    y = np.asarray(y, dtype=np.float64).ravel()
    if x.shape != y.shape or x.size < 2:
        raise DataError(f"paired samples must have the same length >= 2; got {x.size} and {y.size}")
    return x, y


def two_sample_t(x: np.ndarray, y: np.ndarray, alternative: str = "two-sided",
                 equal_var: bool = False) -> TestResult:
    """Unpaired two-sample t-test (Welch by default) of per-user metric values (Li 2023, §2.7.2)."""
    _check_alternative(alternative)
    res = stats.ttest_ind(np.asarray(x, float), np.asarray(y, float), equal_var=equal_var,
                          alternative=alternative)
    return TestResult("welch_t" if not equal_var else "student_t", float(res.statistic),
                      float(res.pvalue), alternative)


#: resamples drawn at a time by `paired_bootstrap_ci` (bounds its memory: chunk × users indices)
_BOOTSTRAP_CHUNK = 200


def paired_bootstrap_ci(x: np.ndarray, y: np.ndarray, confidence: float = 0.95,
                        n_resamples: int = 2000, seed: int = 0) -> Interval:
    """The mean per-user difference mean(x_u − y_u) with its percentile bootstrap interval over
    users (Efron & Tibshirani 1993, ch. 13): the users are resampled with replacement, the
    same users for both models, `n_resamples` times; [low, high] are the (1 − c)/2 and
    (1 + c)/2 quantiles of the resampled means. x, y: per-user values (n_users,) of one set of
    users, in the same order. Same `seed`, same interval."""
    x, y = _paired(x, y)
    return paired_bootstrap_cis(x[:, None], y[:, None], confidence, n_resamples, seed)[0]


def paired_bootstrap_cis(x: np.ndarray, y: np.ndarray, confidence: float = 0.95,
                         n_resamples: int = 2000, seed: int = 0) -> list[Interval]:
    """`paired_bootstrap_ci` of every column of x, y (n_users, n_metrics): one draw of resampled
    users serves every metric (drawing them is most of the cost), and each column's interval
    is the one `paired_bootstrap_ci` gives for that column alone with the same seed."""
    _check_confidence(confidence)
    if n_resamples < 1:
        raise ConfigError(f"n_resamples={n_resamples} must be a positive integer")
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x.ndim != 2 or x.shape != y.shape or x.shape[0] < 2:
        raise DataError(f"paired samples must be (n_users, n_metrics) arrays of one shape with "
                        f"n_users >= 2; got {x.shape} and {y.shape}")
    diff = x - y
    n_users = diff.shape[0]
    rng = np.random.default_rng(seed)
    means = np.empty((n_resamples, diff.shape[1]))
    for start in range(0, n_resamples, _BOOTSTRAP_CHUNK):
        stop = min(start + _BOOTSTRAP_CHUNK, n_resamples)
        users = rng.integers(0, n_users, (stop - start, n_users))
        for column in range(diff.shape[1]):
            means[start:stop, column] = diff[:, column][users].mean(1)
    bounds = np.quantile(means, [(1.0 - confidence) / 2, (1.0 + confidence) / 2], axis=0)
    return [Interval(float(diff[:, j].mean()), float(bounds[0, j]), float(bounds[1, j]),
                     confidence, "paired_bootstrap_percentile") for j in range(diff.shape[1])]


def paired_t(x: np.ndarray, y: np.ndarray, alternative: str = "two-sided") -> TestResult:
    """Paired t-test on the per-user differences x_u - y_u (same users; Li 2023, §2.7.2 uses
    unpaired tests)."""
    _check_alternative(alternative)
    x, y = _paired(x, y)
    res = stats.ttest_rel(x, y, alternative=alternative)
    return TestResult("paired_t", float(res.statistic), float(res.pvalue), alternative)


def mcnemar(hits1: np.ndarray, hits2: np.ndarray, exact: bool | None = None) -> TestResult:
    """McNemar test of paired binary outcomes (hit@K of two models on the same users):
    b = #(1, 0), c = #(0, 1); exact binomial p-value (b ~ Bin(b + c, 1/2)) when exact, else
    χ² = (|b - c| - 1)²/(b + c) with 1 d.o.f.; exact=None picks exact when b + c < 25."""
    h1 = np.asarray(hits1).astype(bool).ravel()
    h2 = np.asarray(hits2).astype(bool).ravel()
    if h1.shape != h2.shape:
        raise DataError(f"hits1 ({h1.size}) and hits2 ({h2.size}) must have the same length")
    b = int(np.sum(h1 & ~h2))
    c = int(np.sum(~h1 & h2))
    details = {"b": float(b), "c": float(c)}
    if b + c == 0:
        return TestResult("mcnemar_exact", 0.0, 1.0, "two-sided", details)
    if exact is None:
        exact = b + c < 25
    if exact:
        pvalue = stats.binomtest(b, b + c, 0.5).pvalue
        return TestResult("mcnemar_exact", float(b), float(pvalue), "two-sided", details)
    stat = (abs(b - c) - 1.0) ** 2 / (b + c)
    return TestResult("mcnemar_chi2", stat, float(stats.chi2.sf(stat, 1)), "two-sided", details)


def wilcoxon_signed_rank(
    x: np.ndarray, y: np.ndarray, alternative: str = "two-sided"
) -> TestResult:
    """Wilcoxon signed-rank test of paired per-user values (scipy; zero differences dropped)."""
    _check_alternative(alternative)
    x, y = _paired(x, y)
    if np.all(x == y):
        return TestResult("wilcoxon", 0.0, 1.0, alternative)
    res = stats.wilcoxon(x, y, alternative=alternative, zero_method="wilcox")
    return TestResult("wilcoxon", float(res.statistic), float(res.pvalue), alternative)


def sign_test(x: np.ndarray, y: np.ndarray, alternative: str = "two-sided") -> TestResult:
    """Sign test: #(x_u > y_u) ~ Bin(#(x_u != y_u), 1/2) under H0 (ties dropped)."""
    _check_alternative(alternative)
    x, y = _paired(x, y)
    wins, losses = int(np.sum(x > y)), int(np.sum(x < y))
    if wins + losses == 0:
        return TestResult("sign", 0.0, 1.0, alternative)
    pvalue = stats.binomtest(wins, wins + losses, 0.5, alternative=alternative).pvalue
    return TestResult("sign", float(wins), float(pvalue), alternative,
                      {"wins": float(wins), "losses": float(losses)})


def _check_pvalues(pvalues: np.ndarray, alpha: float) -> np.ndarray:
    p = np.asarray(pvalues, dtype=np.float64).ravel()
    if p.size == 0 or np.any((p < 0) | (p > 1)) or np.any(np.isnan(p)):
        raise ConfigError("pvalues must be a non-empty array of values in [0, 1]")
    if not 0.0 < alpha < 1.0:
        raise ConfigError(f"alpha={alpha} must be in (0, 1)")
    return p


def bonferroni(pvalues: np.ndarray, alpha: float = 0.05) -> tuple[np.ndarray, np.ndarray]:
    """Bonferroni: adjusted p = min(1, L p); reject where adjusted < alpha. (float64, bool)."""
    p = _check_pvalues(pvalues, alpha)
    adjusted = np.minimum(1.0, p * p.size)
    return adjusted, adjusted < alpha


def holm(pvalues: np.ndarray, alpha: float = 0.05) -> tuple[np.ndarray, np.ndarray]:
    """Holm step-down: sorted p_(i) adjusted to max_{j<=i} min(1, (L - j + 1) p_(j));
    reject where adjusted < alpha. (float64, bool), in the input order."""
    p = _check_pvalues(pvalues, alpha)
    order = np.argsort(p, kind="stable")
    scaled = np.minimum(1.0, p[order] * (p.size - np.arange(p.size)))
    adjusted = np.empty_like(p)
    adjusted[order] = np.maximum.accumulate(scaled)
    return adjusted, adjusted < alpha


def sample_users(
    n_users: int, n_sampled: int, rng: np.random.Generator, replace: bool = False
) -> np.ndarray:
    """Indices of n_sampled users drawn uniformly (without replacement by default, Li 2023, §2.8.6),
    sorted int64."""
    if int(n_sampled) != n_sampled or n_sampled < 1 or (not replace and n_sampled > n_users):
        raise ConfigError(f"n_sampled={n_sampled} must be an integer in [1, n_users={n_users}] "
                          "(without replacement)")
    return np.sort(rng.choice(n_users, size=int(n_sampled), replace=replace)).astype(np.int64)


def user_sampling_estimate(
    per_user_values: np.ndarray,
    n_sampled: int,
    rng: np.random.Generator,
    confidence: float = 0.95,
    dist: str = "normal",
) -> Interval:
    """Estimate of a metric's mean over all M users from n_sampled users drawn without replacement,
    with a CI from their sample variance and the finite-population correction (Li 2023, §2.7.1; Li
    2023, §2.8.6)."""
    values = np.asarray(per_user_values, dtype=np.float64).ravel()
    chosen = sample_users(values.size, n_sampled, rng)
    return mean_ci(values[chosen], confidence, population_size=values.size, dist=dist)


def sampled_users_targets(target_users: np.ndarray, n_sampled: int,
                          rng: np.random.Generator) -> np.ndarray:
    """The targets of n_sampled users drawn uniformly without replacement from the distinct
    users of `target_users` (the user of each target, (M,)): every target of a drawn user, as
    sorted int64 indices into the targets. With one target per user (leave-one-out) this draws
    n_sampled targets."""
    owners = np.asarray(target_users).ravel()
    distinct, owner = np.unique(owners, return_inverse=True)
    chosen = np.zeros(distinct.size, dtype=bool)
    chosen[sample_users(distinct.size, n_sampled, rng)] = True
    return np.flatnonzero(chosen[owner]).astype(np.int64)


def user_sampled_curve(
    global_ranks: np.ndarray,
    n_sampled: int,
    metric: str,
    k_max: int,
    rng: np.random.Generator,
    target_users: np.ndarray | None = None,
) -> np.ndarray:
    """Exact target-level metric curve T@1..k_max over the targets of n_sampled users drawn
    without replacement (Li 2023, §2.8.6): float64 (k_max,). global_ranks (M,): the 1-based
    global rank of each target; target_users (M,): the user of each (None: each target is its own
    user, as in leave-one-out)."""
    ranks = np.asarray(global_ranks).ravel()
    if ranks.size == 0 or np.any(ranks < 1):
        raise ConfigError("global_ranks must be a non-empty array of 1-based ranks")
    if target_users is None:
        target_users = np.arange(ranks.size)
    elif np.asarray(target_users).size != ranks.size:
        raise DataError(f"target_users has {np.asarray(target_users).size} entries for "
                        f"{ranks.size} global ranks; give the user of each target")
    return ranks_curve(ranks[sampled_users_targets(target_users, n_sampled, rng)], metric, k_max)


def ranks_curve(global_ranks: np.ndarray, metric: str, k_max: int) -> np.ndarray:
    """The exact target-level curve T@1..k_max of a set of 1-based global ranks: float64
    (k_max,)."""
    ranks = np.asarray(global_ranks, dtype=np.int64).ravel()
    top = ranks[ranks <= k_max]
    return curve(np.bincount(top - 1, minlength=k_max)[:k_max] / ranks.size, metric, k_max)
