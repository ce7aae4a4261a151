"""The conditional law of the sampled rank given the global rank, A[R-1, r-1] = P(r | R)
(Li et al. 2020, eq. 6; docs/concepts/sampled.md).

Two forms: `conditional_matrix` (dense N x n, float64) and `conditional_band` (scipy CSR with a
fixed-width band per row, for large N·n; docs/concepts/sampled.md). Both are computed in log
space with gammaln, never through C(n-1, r-1) itself, and every row is renormalised to sum to 1.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import scipy.sparse as sp
from scipy.special import gammaln, logsumexp

from linrec.errors import ConfigError, MemoryBudgetError

SCHEMES = ("binomial", "hypergeometric")

#: a dense A above this many bytes raises MemoryBudgetError (use conditional_band instead)
DENSE_BYTES_LIMIT = 1 << 30


def check_sizes(n_items: int, sample_size: int, scheme: str) -> None:
    """Raise ConfigError unless n_items >= 2, sample_size >= 1 (<= n_items without replacement)
    and scheme is one of SCHEMES."""
    if scheme not in SCHEMES:
        raise ConfigError(f"scheme={scheme!r} is not supported; choose one of {SCHEMES}")
    if int(n_items) != n_items or n_items < 2:
        raise ConfigError(f"n_items={n_items} must be an integer >= 2")
    if int(sample_size) != sample_size or sample_size < 1:
        raise ConfigError(f"sample_size={sample_size} must be an integer >= 1")
    if scheme == "hypergeometric" and sample_size > n_items:
        raise ConfigError(
            f"sample_size={sample_size} must be <= n_items={n_items} for sampling without "
            "replacement (scheme='hypergeometric')"
        )


def _log_comb(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """log C(a, b) for 0 <= b <= a, broadcasting a against b; -inf where b < 0 or b > a.
    Only the a-b term is evaluated at the broadcast shape."""
    valid = (b >= 0) & (b <= a)
    out = gammaln(np.maximum(a, 0.0) + 1.0) - gammaln(np.maximum(b, 0.0) + 1.0)
    out = out - gammaln(np.maximum(a - b, 0.0) + 1.0)
    return np.where(valid, out, -np.inf)


def _log_or_floor(x: np.ndarray) -> np.ndarray:
    """log x with log 0 replaced by -1e300, so that 0 * log 0 = 0 and k * log 0 underflows to an
    exp() of 0 (docs/concepts/sampled.md edge cases θ = 0 and θ = 1)."""
    with np.errstate(divide="ignore"):
        return np.where(x > 0, np.log(np.maximum(x, 1e-300)), -1e300)


def log_pmf(
    global_ranks: np.ndarray, sampled_ranks: np.ndarray, n_items: int, sample_size: int,
    scheme: str = "binomial",
) -> np.ndarray:
    """log P(r | R) elementwise, broadcasting global_ranks against sampled_ranks (1-based ranks,
    float64). Impossible (R, r) pairs get -inf or a value below -1e299 (exp gives 0)."""
    big_r = np.asarray(global_ranks, dtype=np.float64)
    r = np.asarray(sampled_ranks, dtype=np.float64)
    n_minus_1 = float(sample_size - 1)
    if scheme == "binomial":
        # Li et al. 2020, eq. 6: C(n-1, r-1) θ^(r-1) (1-θ)^(n-r), θ = (R-1)/(N-1), written with
        # and (N-R) so that 1-θ has no cancellation; the R- and r-only factors are computed
        # once per row / column
        log_comb = gammaln(sample_size) - gammaln(r) - gammaln(sample_size - r + 1.0)
        return (
            log_comb
            + (r - 1.0) * _log_or_floor(big_r - 1.0)
            + (sample_size - r) * _log_or_floor(n_items - big_r)
            - n_minus_1 * math.log(n_items - 1)
        )
    # Li et al. 2020: C(R-1, r-1) C(N-R, n-r) / C(N-1, n-1)
    log_norm = _log_comb(np.array(float(n_items - 1)), np.array(n_minus_1))
    return _log_comb(big_r - 1.0, r - 1.0) + _log_comb(n_items - big_r, sample_size - r) - log_norm


def conditional_matrix(
    n_items: int, sample_size: int, scheme: str = "binomial", log: bool = False
) -> np.ndarray:
    """Dense A (n_items, sample_size) float64 with A[R-1, r-1] = P(r | R) (or its log if log=True).
    Rows sum to 1 (renormalised in log space). Raises MemoryBudgetError above DENSE_BYTES_LIMIT."""
    check_sizes(n_items, sample_size, scheme)
    n_bytes = 8 * n_items * sample_size
    if n_bytes > DENSE_BYTES_LIMIT:
        raise MemoryBudgetError(
            f"dense P(r|R) for n_items={n_items}, sample_size={sample_size} needs "
            f"{n_bytes / 2**30:.2f} GiB > {DENSE_BYTES_LIMIT / 2**30:.0f} GiB; "
            "use conditional_band(...) instead"
        )
    sampled_ranks = np.arange(1, sample_size + 1, dtype=np.float64)[None, :]
    out = np.empty((n_items, sample_size), dtype=np.float64)
    for lo, hi in _row_blocks(n_items, sample_size):
        global_ranks = np.arange(lo + 1, hi + 1, dtype=np.float64)[:, None]
        out[lo:hi] = _normalised_log_rows(global_ranks, sampled_ranks, n_items, sample_size, scheme)
    return out if log else np.exp(out, out=out)


def _row_blocks(n_items: int, row_width: int, block_elements: int = 1 << 22):
    """(lo, hi) row ranges of about block_elements entries each (bounds temporary memory)."""
    block_rows = max(1, block_elements // max(row_width, 1))
    for lo in range(0, n_items, block_rows):
        yield lo, min(lo + block_rows, n_items)


def _normalised_log_rows(
    global_ranks: np.ndarray, sampled_ranks: np.ndarray, n_items: int, sample_size: int,
    scheme: str,
) -> np.ndarray:
    """log P(r | R) on a block of rows, each row renormalised to sum to 1
    (docs/concepts/sampled.md)."""
    log_a = log_pmf(global_ranks, sampled_ranks, n_items, sample_size, scheme)
    return log_a - logsumexp(log_a, axis=1, keepdims=True)


def band_half_width(sample_size: int, tail_mass: float) -> int:
    """Half-width h such that P(|r - E r| > h | R) <= tail_mass for every R, by Hoeffding's bound
    2 exp(-2 h² / (n-1)) (valid with and without replacement)."""
    if not 0.0 < tail_mass < 1.0:
        raise ConfigError(f"tail_mass={tail_mass} must be in (0, 1)")
    return int(math.ceil(math.sqrt(max(sample_size - 1, 0) * math.log(2.0 / tail_mass) / 2.0)))


def conditional_band(
    n_items: int,
    sample_size: int,
    scheme: str = "binomial",
    tail_mass: float = 1e-15,
) -> sp.csr_array:
    """A as a CSR array (n_items, sample_size) that keeps, in each row R, the fixed-width window of
    sampled ranks around the mean 1 + (n-1)(R-1)/(N-1) outside which at most tail_mass of the row
    lies (Hoeffding); rows renormalised to sum to 1. Built in row blocks to bound memory."""
    check_sizes(n_items, sample_size, scheme)
    width = min(sample_size, 2 * band_half_width(sample_size, tail_mass) + 1)
    data = np.empty((n_items, width), dtype=np.float64)
    starts = np.empty(n_items, dtype=np.int64)
    offsets = np.arange(width, dtype=np.int64)
    for lo, hi in _row_blocks(n_items, width):
        global_ranks = np.arange(lo + 1, hi + 1, dtype=np.int64)
        mean_rank = 1.0 + (sample_size - 1) * (global_ranks - 1) / (n_items - 1)
        first = np.rint(mean_rank).astype(np.int64) - (width - 1) // 2
        first = np.clip(first, 1, sample_size - width + 1)
        sampled_ranks = first[:, None] + offsets[None, :]
        data[lo:hi] = np.exp(
            _normalised_log_rows(global_ranks[:, None], sampled_ranks, n_items, sample_size, scheme)
        )
        starts[lo:hi] = first - 1
    indices = (starts[:, None] + offsets[None, :]).astype(np.int32).ravel()
    indptr = np.arange(0, n_items * width + 1, width, dtype=np.int64)
    return sp.csr_array((data.ravel(), indices, indptr), shape=(n_items, sample_size))


#: conditional_operator switches to the banded CSR form above this many dense entries
BAND_ABOVE_ENTRIES = 1 << 23


@functools.lru_cache(maxsize=8)
def _cached_operator(
    n_items: int, sample_size: int, scheme: str, banded: bool
) -> np.ndarray | sp.csr_array:
    if banded:
        band = conditional_band(n_items, sample_size, scheme)
        band.data.setflags(write=False)
        return band
    dense = conditional_matrix(n_items, sample_size, scheme)
    dense.setflags(write=False)
    return dense


def conditional_operator(
    n_items: int, sample_size: int, scheme: str = "binomial", banded: bool | None = None
) -> np.ndarray | sp.csr_array:
    """A = P(r | R), (n_items, sample_size), read-only and cached for reuse across repeats: dense
    when small, banded CSR (`conditional_band`) when n_items·sample_size > BAND_ABOVE_ENTRIES and
    the band is narrower than the matrix (banded=None), or as forced by banded=True/False."""
    check_sizes(n_items, sample_size, scheme)
    if banded is None:
        width = 2 * band_half_width(sample_size, 1e-15) + 1
        banded = n_items * sample_size > BAND_ABOVE_ENTRIES and width < 0.75 * sample_size
    return _cached_operator(int(n_items), int(sample_size), scheme, bool(banded))


def conditional_columns(
    n_items: int, sample_size: int, sampled_ranks: np.ndarray, scheme: str = "binomial"
) -> np.ndarray:
    """Selected columns of A: (n_items, len(sampled_ranks)) float64 with [R-1, j] = P(r_j | R),
    computed directly in log space (no row renormalisation; exact to gammaln accuracy). Memory
    N x (number of distinct observed ranks) instead of N x n (docs/concepts/sampled.md: EM needs
    only these)."""
    check_sizes(n_items, sample_size, scheme)
    ranks = np.asarray(sampled_ranks, dtype=np.float64)
    if ranks.size and (ranks.min() < 1 or ranks.max() > sample_size):
        raise ConfigError(f"sampled ranks must lie in [1, {sample_size}]")
    out = np.empty((n_items, ranks.size), dtype=np.float64)
    for lo, hi in _row_blocks(n_items, max(ranks.size, 1)):
        global_ranks = np.arange(lo + 1, hi + 1, dtype=np.float64)[:, None]
        out[lo:hi] = np.exp(log_pmf(global_ranks, ranks[None, :], n_items, sample_size, scheme))
    return out
