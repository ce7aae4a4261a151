"""Mapping functions f: SHR@k ≈ HR@f(k) (Li et al. 2020, §3) and their alignment errors (Li et al.
2020, App. A).

`mapping_function(kind, n_items, sample_size, **params)` returns f(1..n) as float64 (n,):
- "linear" (Li et al. 2020, eq. 9): f(k) = (k-1)(N-1)/(n-1) + 1;
- "bound" (Li et al. 2020, eqs. 10–13): ⌊(k - 1/2)(N-1)/(n-1) + 1/2⌋, clipped to [1, N];
- "beta" (Li et al. 2020, eqs. 14–17, param a > 0): the Beta(a, 1) recurrence in log space, closed
form k(N-1)/n + 1
  at a = 1;
- "beta_p" (Li et al. 2020, eq. 19, param sampled_ranks): Beta@a with a fitted by the iterative Beta
MLE;
- "dataset" (Li et al. 2020, §4.2, param reference_sampled_ranks): Beta@a with one a per dataset,
fitted on
  reference models (median of their Beta@P fixed points by default);
- "oracle" (Li et al. 2020, §3, param global_ranks; validation only): argmin_K |HR@K - E[SHR@k]|.
Non-integer locations read HR@⌊f + 1e-9⌋ (Li et al. 2020, §3 convention, docs/concepts/sampled.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from linrec.errors import ConfigError, DataError
from linrec.eval._checks import check_ranks, check_sample_size
from linrec.eval.expected import expected_sampled_curve, global_rank_distribution
from linrec.params import check_choice, check_int, check_real

MAPPINGS = ("linear", "bound", "beta", "beta_p", "dataset", "oracle")
#: slack of the floor rule ⌊f + 1e-9⌋ (f(k; 1) can be a half-integer; Li et al. 2020, §3)
FLOOR_SLACK = 1e-9
#: how one a per dataset is taken from the reference models' Beta@P values (Li et al. 2020, §4.2)
DATASET_REDUCTIONS = ("median", "mean", "first")


def linear_mapping(n_items: int, sample_size: int) -> np.ndarray:
    """f_lin(k) = (k-1)(N-1)/(n-1) + 1, k = 1..n (Li et al. 2020, eq. 9): float64 (n,)."""
    check_sample_size(n_items, sample_size)
    k = np.arange(1, sample_size + 1, dtype=np.float64)
    return (k - 1.0) * (n_items - 1.0) / (sample_size - 1.0) + 1.0


def bound_mapping(n_items: int, sample_size: int) -> np.ndarray:
    """f_bound(k) = ⌊(k - 1/2)(N-1)/(n-1) + 1/2⌋ clipped to [1, N] (Li et al. 2020, eqs. 10–13):
    float64 (n,)."""
    check_sample_size(n_items, sample_size)
    k = np.arange(1, sample_size + 1, dtype=np.float64)
    f = np.floor((k - 0.5) * (n_items - 1.0) / (sample_size - 1.0) + 0.5)
    return np.clip(f, 1.0, float(n_items))


def beta_mapping(n_items: int, sample_size: int, a: float) -> np.ndarray:
    """f(k; a), k = 1..n (Li et al. 2020, eqs. 14–18): float64 (n,). The recurrence solves to
    y_k = (f(k;a) - 1)^a = a (N-1)^a Σ_{l<k} C(n-1,l) B(a+l, n-l) = (N-1)^a S_k / S_n with
    S_k = Σ_{l<k} t_l, t_l = Γ(l+a)/Γ(l+1) (Lemma 3.1: a S_n Γ(n)/Γ(n+a) = 1). t_l is built in log
    space from t_{l+1}/t_l = (l+a)/(l+1), which avoids the ~1e-11 error of gammaln at l ~ 3200
    (amplified by 1/a); f(n; a) = N; f(k; 1) = k(N-1)/n + 1 in closed form."""
    check_sample_size(n_items, sample_size)
    check_real(a, "a", gt=0, hint="a is the Beta shape parameter")
    k = np.arange(1, sample_size + 1, dtype=np.float64)
    if a == 1.0:
        return k * (n_items - 1.0) / sample_size + 1.0
    # log t_l - log t_0 = Σ_{j=1}^{l} log(1 + (a-1)/j), l = 0..n-1
    log_t = np.concatenate([[0.0], np.cumsum(np.log1p((a - 1.0) / k[:-1]))])
    log_partial = np.log(np.cumsum(np.exp(log_t - log_t.max())))  # log S_k + const, k = 1..n
    return (n_items - 1.0) * np.exp((log_partial - log_partial[-1]) / a) + 1.0


@dataclass(frozen=True)
class BetaPFit:
    """Beta@P fixed point (Li et al. 2020, eq. 19): a, the iterates a^(0..n_iter), whether |Δa| <
    tol."""

    a: float
    history: tuple[float, ...]
    converged: bool

    @property
    def n_iter(self) -> int:
        return len(self.history) - 1


def fit_beta_p(
    sampled_ranks: np.ndarray,
    n_items: int,
    sample_size: int,
    a0: float = 1.0,
    max_iter: int = 20,
    tol: float = 1e-6,
) -> BetaPFit:
    """Iterative Beta MLE a^(i+1) = -M / Σ_u ln((f(r_u; a^(i)) - 1)/(N-1)) (Li et al. 2020, eq. 19),
    from the sampled ranks r_u in [1, n] (one per target). Works on the rank histogram."""
    check_sample_size(n_items, sample_size)
    ranks = check_ranks(sampled_ranks, sample_size, "sampled_ranks").ravel()
    if ranks.size == 0:
        raise ConfigError("sampled_ranks is empty")
    if np.all(ranks == sample_size):
        raise DataError(f"every sampled rank equals sample_size={sample_size}: the Beta MLE "
                        "diverges (a -> inf); the model ranks every target last")
    check_int(max_iter, "max_iter", ge=1)
    check_real(tol, "tol", gt=0)
    counts = np.bincount(ranks - 1, minlength=sample_size).astype(np.float64)
    history = [float(a0)]
    a = float(a0)
    for _ in range(int(max_iter)):
        f = beta_mapping(n_items, sample_size, a)
        # x_u = (f(r_u) - 1)/(N-1) in (0, 1]; x = 1 only at r = n, where ln 1 = 0 (Li et al. 2020,
        # eq. 19)
        log_x = np.log((f - 1.0) / (n_items - 1.0))
        a_new = -ranks.size / float(counts @ log_x)
        history.append(a_new)
        if abs(a_new - a) < tol:
            return BetaPFit(a_new, tuple(history), True)
        a = a_new
    return BetaPFit(a, tuple(history), False)


def dataset_beta_parameter(
    reference_sampled_ranks: Sequence[np.ndarray],
    n_items: int,
    sample_size: int,
    reduce: str = "median",
    **fit_params: float,
) -> float:
    """One Beta parameter a for a dataset (Li et al. 2020, §4.2 remedies 1–2): the Beta@P fixed
    points of the reference models' sampled ranks, reduced by "median", "mean" or "first"."""
    check_choice(reduce, "reduce", DATASET_REDUCTIONS)
    if len(reference_sampled_ranks) == 0:
        raise ConfigError("reference_sampled_ranks is empty; give the sampled ranks of at least "
                          "one reference model")
    values = [fit_beta_p(r, n_items, sample_size, **fit_params).a for r in reference_sampled_ranks]
    if reduce == "first":
        return float(values[0])
    return float(np.median(values) if reduce == "median" else np.mean(values))


def oracle_mapping(
    global_ranks: np.ndarray, n_items: int, sample_size: int, scheme: str = "binomial"
) -> np.ndarray:
    """f*(k) = argmin_{K in 0..N} |HR@K - E[SHR@k]| (Li et al. 2020, §3), E[SHR@k] from the true W_R
    and the sampled-rank law: float64 (n,) of integers (the smallest such K on a plateau of HR)."""
    w = global_rank_distribution(global_ranks, n_items)
    expected_shr = expected_sampled_curve(w, n_items, sample_size, "recall", sample_size, scheme)
    hr = np.concatenate([[0.0], np.cumsum(w)])  # hr[K] = HR@K, K = 0..N
    upper = np.clip(np.searchsorted(hr, expected_shr, side="left"), 0, n_items)
    lower = np.clip(upper - 1, 0, n_items)
    best = np.where(np.abs(hr[lower] - expected_shr) <= np.abs(hr[upper] - expected_shr),
                    lower, upper)
    return np.searchsorted(hr, hr[best], side="left").astype(np.float64)


def mapping_function(kind: str, n_items: int, sample_size: int, **params: object) -> np.ndarray:
    """f(1..n) of mapping `kind` (one of MAPPINGS; see the module docstring for the params):
    float64 (sample_size,), values in [1, N] (the oracle may return 0)."""
    check_choice(kind, "mapping kind", MAPPINGS)
    allowed = {
        "linear": set(), "bound": set(), "beta": {"a"},
        "beta_p": {"sampled_ranks", "a0", "max_iter", "tol"},
        "dataset": {"reference_sampled_ranks", "reduce", "a0", "max_iter", "tol"},
        "oracle": {"global_ranks", "scheme"},
    }[kind]
    unknown = set(params) - allowed
    if unknown:
        raise ConfigError(f"mapping kind={kind!r} does not take {sorted(unknown)}; "
                          f"allowed parameters: {sorted(allowed)}")
    required = {"beta": "a", "beta_p": "sampled_ranks", "dataset": "reference_sampled_ranks",
                "oracle": "global_ranks"}.get(kind)
    if required is not None and required not in params:
        raise ConfigError(f"mapping kind={kind!r} needs the parameter {required}=")
    if kind == "linear":
        return linear_mapping(n_items, sample_size)
    if kind == "bound":
        return bound_mapping(n_items, sample_size)
    if kind == "beta":
        return beta_mapping(n_items, sample_size, float(params["a"]))
    if kind == "oracle":
        return oracle_mapping(params["global_ranks"], n_items, sample_size,
                              str(params.get("scheme", "binomial")))
    fit_params = {key: params[key] for key in ("a0", "max_iter", "tol") if key in params}
    if kind == "beta_p":
        a = fit_beta_p(params["sampled_ranks"], n_items, sample_size, **fit_params).a
    else:
        a = dataset_beta_parameter(params["reference_sampled_ranks"], n_items, sample_size,
                                   str(params.get("reduce", "median")), **fit_params)
    return beta_mapping(n_items, sample_size, a)


@dataclass(frozen=True)
class AlignedCurves:
    """shr[k-1] = SHR@k and hr_at_f[k-1] = HR@⌊f(k) + 1e-9⌋ for k = 1..k_max (float64 (k_max,);
    hr_at_f is None without global ranks); locations = ⌊f(k) + 1e-9⌋ as int64."""

    shr: np.ndarray
    hr_at_f: np.ndarray | None
    locations: np.ndarray


def aligned_curves(
    sampled_ranks: np.ndarray,
    f: np.ndarray,
    k_max: int | None = None,
    global_ranks: np.ndarray | None = None,
) -> AlignedCurves:
    """SHR@k = (1/M) Σ_u δ(r_u <= k) and HR@f(k) = (1/M') Σ_u δ(R_u <= ⌊f(k) + 1e-9⌋) for
    k = 1..k_max (default len(f)) (Li et al. 2020, §3; eqs. 3–5). sampled_ranks: int
    (M,) in [1, len(f)]; global_ranks: int (M',) 1-based, or None."""
    f = np.asarray(f, dtype=np.float64)
    if f.ndim != 1 or f.size == 0 or not np.all(np.isfinite(f)):
        raise ConfigError(f"f must be a finite 1-d array f(1..n); got shape {f.shape}")
    sample_size = len(f)
    k_max = sample_size if k_max is None else k_max
    k_max = check_int(k_max, "k_max", ge=1, le=sample_size, hint=f"len(f) = {sample_size}")
    ranks = check_ranks(sampled_ranks, sample_size, "sampled_ranks").ravel()
    if ranks.size == 0:
        raise ConfigError("sampled_ranks is empty")
    shr = np.cumsum(np.bincount(ranks - 1, minlength=sample_size))[:k_max] / ranks.size
    locations = np.floor(f[:k_max] + FLOOR_SLACK).astype(np.int64)
    hr_at_f = None
    if global_ranks is not None:
        big_r = np.sort(np.asarray(global_ranks).ravel())
        if big_r.size == 0:
            raise ConfigError("global_ranks is empty")
        check_ranks(big_r, np.iinfo(np.int64).max, "global_ranks")
        hr_at_f = np.searchsorted(big_r, locations, side="right") / big_r.size
    return AlignedCurves(shr=shr, hr_at_f=hr_at_f, locations=locations)


def alignment_errors(shr: np.ndarray, hr_at_f: np.ndarray) -> dict[str, float]:
    """Alignment errors of Li et al. 2020, Table 7 (their App. A) over k = 1..len(shr): abs, rel
    (mean over all k), abs@1, rel@1, abs@2-10, rel@2-10 (mean over k = 2..min(10, len)). rel divides
    by SHR@k; a k with SHR@k = 0 contributes 0 (the Li et al. 2023, Tables 1–11 convention)."""
    shr = np.asarray(shr, dtype=np.float64)
    hr_at_f = np.asarray(hr_at_f, dtype=np.float64)
    if shr.shape != hr_at_f.shape or shr.ndim != 1 or shr.size < 2:
        raise ConfigError(f"shr {shr.shape} and hr_at_f {hr_at_f.shape} must be equal 1-d "
                          "curves of length >= 2")
    abs_err = np.abs(hr_at_f - shr)
    rel_err = np.divide(abs_err, shr, out=np.zeros_like(abs_err), where=shr > 0)
    window = slice(1, min(10, shr.size))
    return {
        "abs": float(abs_err.mean()),
        "rel": float(rel_err.mean()),
        "abs@1": float(abs_err[0]),
        "rel@1": float(rel_err[0]),
        "abs@2-10": float(abs_err[window].mean()),
        "rel@2-10": float(rel_err[window].mean()),
    }
