"""Estimators of the global-rank distribution P(R) from sampled ranks: MLE by EM, weighted MLE and
maximal entropy with squared fit (MES) (Jin et al. 2021b; Li 2023, §2.4)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse as sp
from scipy.special import logsumexp

from linrec.errors import ConfigError
from linrec.eval.estimators._linalg import BandBlocks, ConditionalOp, band_blocks, weighted_gram
from linrec.eval.estimators.result import EstimateResult
from linrec.hardware import blas_threads
from linrec.params import check_choice, check_int, check_real

if TYPE_CHECKING:
    from linrec.eval.estimators._context import EstimatorInput

#: mixture denominators are floored here (Li 2023, eqs. 28–33 numerics, docs/concepts/sampled.md)
MIX_FLOOR = 1e-300
#: MES solvers (Li 2023, eqs. 36–38)
MES_SOLVERS = ("auto", "dual", "clarabel", "scs")
#: row-block size of the dense EM step (half an L2 cache; measured best on 2 cores)
EM_BLOCK_BYTES = 1 << 19


def em_mixture(
    cond: ConditionalOp,
    weights: np.ndarray,
    n_iter: int,
    init: np.ndarray,
    tol: float | None = None,
) -> tuple[np.ndarray, np.ndarray, int]:
    """EM for the weights π of a mixture with known components (Li 2023, eq. 33, Li et al. 2023, eq.
    12).

    cond: (N, J) column j = P(observation j | R); weights: (J,) non-negative observation weights
    summing to 1 (the sampled-rank histogram, or its re-weighting); init: (N,) positive start.
    Update π ← π ⊙ A (w / Aᵀπ). Returns (π, per-observation-weight log-likelihood trace of length
    iterations+1, iterations). Stops early when tol is set and the increase is < tol·|loglik|.
    Several samples at once: weights (J, B) and init (N, B) give π (N, B) and a trace
    (iterations+1, B); each iteration then streams A once for all B samples (matrix products
    instead of B matrix-vector products) and early stopping waits for every sample.
    """
    pi = init.astype(np.float64, copy=True)
    batched = weights.ndim == 2
    w = weights if batched else weights[:, None]
    pi = pi if batched else pi[:, None]
    mix = np.asarray(cond.T @ pi)
    bands = band_blocks(cond)
    if bands is not None:
        # every column stays: an unobserved one gets the ratio 0 and weighs 0 in the trace
        operator, w_obs, step = bands, w, _em_step_banded
    else:
        observed = (w > 0).any(axis=1)
        w_obs, mix = w[observed], mix[observed]
        operator = cond[:, np.flatnonzero(observed)] if not observed.all() else cond
        step = _em_step_sparse if sp.issparse(operator) else _em_step_dense
    mix = np.maximum(mix, MIX_FLOOR)
    trace = np.empty((n_iter + 1, w.shape[1]))
    trace[0] = (w_obs * np.log(mix)).sum(axis=0)
    done = n_iter
    # the cache-sized matrix-vector products run faster on one BLAS thread than on several
    with blas_threads(1):
        for it in range(n_iter):
            mix = np.maximum(step(operator, pi, w_obs / mix), MIX_FLOOR)
            trace[it + 1] = (w_obs * np.log(mix)).sum(axis=0)
            if tol is not None and np.all(trace[it + 1] - trace[it] < tol * np.abs(trace[it + 1])):
                done = it + 1
                break
    trace = trace[: done + 1]
    # Li 2023, eqs. 28–33: a non-decreasing log-likelihood is a required invariant of EM
    if np.any(np.diff(trace, axis=0) < -1e-10 * np.maximum(1.0, np.abs(trace[-1]))):
        raise ArithmeticError(f"EM log-likelihood decreased: {np.diff(trace, axis=0).min():.3e}")
    pi /= pi.sum(axis=0)
    return (pi, trace, done) if batched else (pi[:, 0], trace[:, 0], done)


def _em_step_dense(cond: np.ndarray, pi: np.ndarray, ratio: np.ndarray) -> np.ndarray:
    """π ← π ⊙ (A ratio) in place and return the new Aᵀπ (π (N, B), ratio (J, B)), in row blocks
    that stay in cache so A is streamed from memory once per iteration instead of twice."""
    new_mix = np.zeros((cond.shape[1], pi.shape[1]))
    block = max(1, EM_BLOCK_BYTES // (8 * max(cond.shape[1], 1)))
    for lo in range(0, cond.shape[0], block):
        rows = cond[lo : lo + block]
        pi[lo : lo + block] *= rows @ ratio
        new_mix += rows.T @ pi[lo : lo + block]
    return new_mix


def _em_step_sparse(cond: sp.csr_array, pi: np.ndarray, ratio: np.ndarray) -> np.ndarray:
    pi *= cond @ ratio
    return np.asarray(cond.T @ pi)


def _em_step_banded(bands: BandBlocks, pi: np.ndarray, ratio: np.ndarray) -> np.ndarray:
    """The dense step on a banded A: each dense block is used for both products while in cache
    (at Gowalla's N with n = 500–1000, 1.5x the two CSR products for one sample and 3.6–4.4x
    for 10–100; experiments/benchmarks/bench_em_banded.py)."""
    new_mix = np.zeros((bands.shape[1], pi.shape[1]))
    for (r0, r1), (c0, c1), block in bands:
        rows = pi[r0:r1]
        rows *= block @ ratio[c0:c1]
        new_mix[c0:c1] += block.T @ rows
    return new_mix


def initial_distribution(init: str | np.ndarray, n_items: int) -> np.ndarray:
    """EM start: "uniform" (Li 2023, eqs. 28–33 default) or a positive array of length n_items."""
    if isinstance(init, str):
        if init != "uniform":
            raise ConfigError(f"init={init!r} must be 'uniform' or an array of length n_items")
        return np.full(n_items, 1.0 / n_items)
    start = np.asarray(init, dtype=np.float64)
    if start.shape != (n_items,) or not np.all(start > 0) or not np.all(np.isfinite(start)):
        raise ConfigError(f"init must be a positive finite array of length n_items={n_items}")
    return start / start.sum()


def check_iterations(n_iter: int) -> int:
    return check_int(n_iter, "n_iter", ge=0)


def mle(
    cond: ConditionalOp, histogram: np.ndarray, n_iter: int = 100,
    init: str | np.ndarray = "uniform", tol: float | None = None,
) -> tuple[np.ndarray, np.ndarray, int]:
    """MLE of P(R) for a mixture of binomials (Li 2023, eqs. 28–33). Returns (p_hat (N,), trace,
    iters); histograms (n, B) of B samples give p_hat (N, B) from one batched EM."""
    start = initial_distribution(init, cond.shape[0])
    if histogram.ndim == 2:
        start = np.repeat(start[:, None], histogram.shape[1], axis=1)
    return em_mixture(cond, histogram, check_iterations(n_iter), start, tol)


def rank_weights(kind: str | Callable | np.ndarray, sample_size: int, scale: float) -> np.ndarray:
    """w(r), r = 1..n, for the weighted MLE (Li 2023, eqs. 34–35; the decay scale C is not
    published): "ap" 1/(1+(r-1)/C), "ndcg" 1/log2(1+r/C), a callable of the 1-based rank array, or
    an array of length n."""
    ranks = np.arange(1, sample_size + 1, dtype=np.float64)
    if isinstance(kind, str):
        scale = check_real(scale, "weight_scale", gt=0)
        if kind == "ap":
            w = 1.0 / (1.0 + (ranks - 1.0) / scale)
        elif kind == "ndcg":
            w = 1.0 / np.log2(1.0 + ranks / scale)
        else:
            raise ConfigError(f"weights={kind!r} must be 'ap', 'ndcg', a callable or an array")
    else:
        w = np.asarray(kind(ranks) if callable(kind) else kind, dtype=np.float64)
    if w.shape != (sample_size,) or not np.all(np.isfinite(w)) or np.any(w < 0):
        raise ConfigError(f"rank weights must be finite, >= 0, of length sample_size={sample_size}")
    return w


def weighted_mle(
    cond: ConditionalOp, histogram: np.ndarray, weights: str | Callable | np.ndarray = "ap",
    weight_scale: float = 10.0, n_iter: int = 100, init: str | np.ndarray = "uniform",
    tol: float | None = None,
) -> tuple[np.ndarray, np.ndarray, int]:
    """Weighted MLE (Li 2023, eqs. 34–35): the MLE fitted to the re-weighted histogram w·P~ / Σ
    w·P~, so it is biased toward top ranks by design. Returns (p_hat, trace, iters)."""
    w = rank_weights(weights, cond.shape[1], weight_scale) * histogram
    if w.sum() <= 0:
        raise ConfigError("rank weights are zero on every observed sampled rank")
    return mle(cond, w / w.sum(), n_iter=n_iter, init=init, tol=tol)


def fit_scale_value(fit_scale: str | float, sample_size: int, n_targets: int) -> float:
    """MES fit-term scale: "n" (the authors' code), "M" (paper) or a positive number (Li 2023, eqs.
    36–38)."""
    if fit_scale == "n":
        return float(sample_size)
    if fit_scale == "M":
        return float(n_targets)
    if isinstance(fit_scale, str) or not fit_scale > 0:
        raise ConfigError(f"fit_scale={fit_scale!r} must be 'n', 'M' or a positive number")
    return float(fit_scale)


def mes(
    cond: ConditionalOp, histogram: np.ndarray, fit_scale: float, entropy_weight: float = 0.01,
    solver: str = "auto", tol: float = 1e-11, max_iter: int = 200,
) -> tuple[np.ndarray, int, str]:
    """MES (Li 2023, eqs. 36–38): argmin_π s·Σ_r P~(r)((Aᵀπ)_r − P~(r))² − η·H(π) on the simplex,
    with s = fit_scale and η = entropy_weight. solver: "dual" (Newton on the n-dimensional concave
    dual; reaches a lower objective than cvxpy/CLARABEL in the tests, ~100x faster), "clarabel" or
    "scs" (cvxpy, exponential cone: the authors' formulation), or "auto" (dual, falling back to
    CLARABEL if Newton stalls). Returns (p_hat (N,), iterations, solver description)."""
    check_real(entropy_weight, "entropy_weight", gt=0)
    observed = np.flatnonzero(histogram > 0)
    h_obs = histogram[observed]
    if observed.size == cond.shape[1] and solver in ("dual", "auto"):
        cond_obs = cond  # keeps a banded A banded for the dual's Gram products
    else:
        cond_obs = cond[:, observed]
        cond_obs = cond_obs.toarray() if sp.issparse(cond_obs) else cond_obs
    check_choice(solver, "solver", MES_SOLVERS)
    if solver in ("dual", "auto"):
        try:
            # n x n solves and Gram products: one BLAS thread is several times faster on 2 cores
            with blas_threads(1):
                p_hat, iterations = _mes_dual(cond_obs, h_obs, fit_scale, entropy_weight, tol,
                                              max_iter)
            return p_hat, iterations, "dual-newton"
        except ArithmeticError:
            if solver == "dual":
                raise
        p_hat, iterations, used = _mes_cvxpy(cond_obs, h_obs, fit_scale, entropy_weight,
                                             "CLARABEL")
        return p_hat, iterations, f"{used} (dual stalled)"
    return _mes_cvxpy(cond_obs, h_obs, fit_scale, entropy_weight, solver.upper())


def _mes_cvxpy(
    cond_obs: np.ndarray, h_obs: np.ndarray, fit_scale: float, entropy_weight: float, solver: str
) -> tuple[np.ndarray, int, str]:
    import cvxpy as cp

    pi = cp.Variable(cond_obs.shape[0], nonneg=True)
    residual = cond_obs.T @ pi - h_obs
    objective = fit_scale * cp.sum(cp.multiply(h_obs, cp.square(residual)))
    objective = objective - entropy_weight * cp.sum(cp.entr(pi))
    problem = cp.Problem(cp.Minimize(objective), [cp.sum(pi) == 1])
    problem.solve(solver=solver)
    if pi.value is None or problem.status not in ("optimal", "optimal_inaccurate"):
        raise ArithmeticError(f"MES: cvxpy/{solver} finished with status {problem.status}")
    # docs/concepts/sampled.md: clip tiny negatives and renormalise
    p_hat = np.maximum(np.asarray(pi.value, dtype=np.float64), 0.0)
    iterations = problem.solver_stats.num_iters
    return p_hat / p_hat.sum(), int(iterations or 0), f"cvxpy/{solver} ({problem.status})"


def _mes_dual(
    cond_obs: np.ndarray, h_obs: np.ndarray, fit_scale: float, entropy_weight: float,
    tol: float, max_iter: int,
) -> tuple[np.ndarray, int]:
    """Newton on the concave dual of MES. With y = Aᵀπ and multipliers λ for y = Aᵀπ:
    π(λ) = softmax(−Aλ/η), y_r = P~_r + λ_r/(2 s P~_r), and λ minimises the convex
    f(λ) = η·logsumexp(−Aλ/η) + λᵀP~ + Σ_r λ_r² / (4 s P~_r)."""
    eta, inv_curv = entropy_weight, 1.0 / (2.0 * fit_scale * h_obs)

    def value(lam: np.ndarray) -> tuple[float, np.ndarray]:
        logits = -np.asarray(cond_obs @ lam).ravel() / eta
        lse = logsumexp(logits)
        return eta * lse + lam @ h_obs + 0.5 * lam @ (inv_curv * lam), np.exp(logits - lse)

    lam = np.zeros(len(h_obs))
    f, pi = value(lam)
    floor_grad = np.inf
    for it in range(1, max_iter + 1):
        mix = np.asarray(cond_obs.T @ pi).ravel()
        # the gradient is the primal residual y(λ) − Aᵀπ(λ): stop when it is below tol
        grad = -mix + h_obs + inv_curv * lam
        grad_max = np.abs(grad).max()
        if grad_max < tol:
            return pi, it
        hess = (weighted_gram(cond_obs, pi) - np.outer(mix, mix)) / eta + np.diag(inv_curv)
        step = -np.linalg.solve(hess, grad)
        decrement = -grad @ step
        if decrement <= 1e-13 * max(1.0, abs(f)):
            # the predicted decrease is below the rounding of f, so the line search cannot see
            # it: take pure Newton steps while the gradient still shrinks, then stop at its floor
            if grad_max >= floor_grad:
                if grad_max > 1e3 * tol:
                    break
                return pi, it
            floor_grad = grad_max
            lam = lam + step
            f, pi = value(lam)
            continue
        t = 1.0
        while True:  # backtracking (Armijo) line search
            f_new, pi_new = value(lam + t * step)
            if f_new <= f - 0.25 * t * decrement:
                break
            t *= 0.5
            if t < 1e-10:
                raise ArithmeticError(
                    f"MES dual Newton stalled at |grad| = {grad_max:.2e} (entropy_weight "
                    f"{eta:g} too small against fit_scale {fit_scale:g}?); use solver='clarabel'"
                )
        lam, f, pi = lam + t * step, f_new, pi_new
    raise ArithmeticError(f"MES dual Newton did not converge in {max_iter} iterations")


# --- runners (linrec.eval.estimators.registry) ---


def run_mle(run: EstimatorInput, *, n_iter: int = 100, init: str | np.ndarray = "uniform",
            tol: float | None = None) -> EstimateResult:
    p_hat, trace, iterations = mle(run.cond, run.histogram, n_iter, init, tol)
    return run.result(p_hat, params=init_params(init, tol), iterations=iterations,
                      solver="em", log_likelihood=trace)


def run_weighted_mle(run: EstimatorInput, *, weights="ap", weight_scale: float = 10.0,
                     n_iter: int = 100, init: str | np.ndarray = "uniform",
                     tol: float | None = None) -> EstimateResult:
    p_hat, trace, iterations = weighted_mle(
        run.cond, run.histogram, weights, weight_scale, n_iter, init, tol
    )
    params = {"weights": weights if isinstance(weights, str) else "custom",
              "weight_scale": weight_scale, **init_params(init, tol)}
    return run.result(p_hat, params=params, iterations=iterations, solver="em",
                      log_likelihood=trace)


def run_mes(run: EstimatorInput, *, fit_scale: str | float = "n", entropy_weight: float = 0.01,
            solver: str = "auto") -> EstimateResult:
    scale = fit_scale_value(fit_scale, run.sample_size, run.n_targets)
    p_hat, iterations, used = mes(run.cond, run.histogram, scale, entropy_weight, solver)
    params = {"fit_scale": fit_scale, "fit_scale_value": scale, "entropy_weight": entropy_weight}
    return run.result(p_hat, params=params, iterations=iterations, solver=used)


def init_params(init: str | np.ndarray, tol: float | None) -> dict[str, Any]:
    """The EM start and tolerance as recorded in EstimateResult.params."""
    return {"init": init if isinstance(init, str) else "array", "tol": tol}
