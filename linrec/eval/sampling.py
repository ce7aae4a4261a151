"""Item sampling for sampled evaluation (spec/evaluation.md §0.2–§0.3, §2.4, §8.2, §8.5).

Three ways to get sampled ranks r (1-based rank of a target among itself and its n-1 sampled items):
- real item sampling for a trained model: `draw_negatives` / `NegativeSampler` draw the item ids,
  `sampled_ranks_from_scores` ranks each target among them with the exact ranking's tie-break, and
  `SampledRankHook` does both inside the evaluator's batch pass;
- simulation from global ranks (research/validation, exact in distribution, no scores needed):
  `simulate_sampled_ranks` (fixed n) and `simulate_adaptive_ranks` (Algorithm 1, nested doubling);
- `efficiency_curve`: the per-level sampling cost of an adaptive run (spec §8.5).

Sample sets are seeded per (run seed, repeat) and drawn in fixed blocks of consecutive targets
(`block_targets(sample_size)`, about BLOCK_ENTRIES item ids each) of the canonical target order
(row-major order of `EvalSet.targets`), each block from its own `numpy.random.Generator`: they
depend on the seed, the repeat and the evaluation data only, never on the model or on the batch
size of the scoring pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from linrec.data.splits import EvalSet
from linrec.errors import ConfigError, DataError
from linrec.eval.ranks import beats

#: item pools a target's sampled items are drawn from (spec §0.2; "given" = EvalSet.negatives, NCF)
POOLS = ("all_but_target", "non_interacted", "given")
#: item ids per independently seeded block of draws (part of the sampling definition: changing it
#: changes every sample set); a block holds block_targets(sample_size) consecutive targets
BLOCK_ENTRIES = 1 << 17
#: domain tag mixed into every sampling seed, so that the same run seed used elsewhere gives
#: different streams
_SEED_TAG = 0x5A3D_17E5
#: dense-row budget (floats) of the without-replacement fallback used when n-1 > pool/2
_DENSE_FLOATS = 1 << 23
#: sampled items compared per chunk of the rank kernel (its buffers stay in cache)
_KERNEL_ENTRIES = 1 << 16
#: largest span of score cells (about the L2 cache) the kernel reads ahead of a gather
_TOUCH_FLOATS = 1 << 18


# ---------------------------------------------------------------------------------------------
# validation helpers (shared with expected.py and estimators/mapping.py)
# ---------------------------------------------------------------------------------------------


def check_sample_size(n_items: int, sample_size: int) -> None:
    """Raise ConfigError unless n_items >= 3 and 2 <= sample_size <= n_items - 1 (integers).
    sample_size is the sample set size n: the target plus n-1 sampled items."""
    if int(n_items) != n_items or n_items < 3:
        raise ConfigError(f"n_items={n_items} must be an integer >= 3")
    if int(sample_size) != sample_size or not 2 <= sample_size <= n_items - 1:
        raise ConfigError(
            f"sample_size={sample_size} must be an integer in [2, n_items - 1] = "
            f"[2, {n_items - 1}] (the target plus sample_size - 1 sampled items)"
        )


def block_targets(sample_size: int) -> int:
    """Targets per seeded block of draws: max(1, BLOCK_ENTRIES // (sample_size - 1))."""
    return max(1, BLOCK_ENTRIES // max(int(sample_size) - 1, 1))


def check_ranks(ranks: Any, upper: Any, what: str) -> np.ndarray:
    """ranks as int64, after checking that every entry is an integer in [1, upper] (upper: scalar
    or array broadcastable to ranks). Raises ConfigError naming `what`, the value and the range."""
    values = np.asarray(ranks)
    if not np.issubdtype(values.dtype, np.integer):
        as_float = values.astype(np.float64).ravel()
        bad = ~np.isfinite(as_float) | (as_float != np.round(as_float))
        if np.any(bad):
            raise ConfigError(f"{what} must be integers; got {as_float[np.flatnonzero(bad)[0]]!r}")
    out = values.astype(np.int64)
    upper_arr = np.broadcast_to(np.asarray(upper), out.shape)
    bad = (out < 1) | (out > upper_arr)
    if np.any(bad):
        idx = np.flatnonzero(bad.ravel())[0]
        raise ConfigError(
            f"{what}[{idx}]={out.ravel()[idx]} is outside the allowed range "
            f"[1, {upper_arr.ravel()[idx]}] (1-based ranks)"
        )
    return out


def check_pool(pool: str) -> None:
    """Raise ConfigError unless pool is one of POOLS."""
    if pool not in POOLS:
        raise ConfigError(f"pool={pool!r} is not supported; choose one of {POOLS}")


def _as_rng(rng: np.random.Generator | int | None) -> np.random.Generator:
    if rng is None:
        raise ConfigError("rng is required: pass a numpy.random.Generator (or an integer seed) "
                          "derived from the run seed")
    if isinstance(rng, np.random.Generator):
        return rng
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool):
        return np.random.default_rng(int(rng))
    raise ConfigError(f"rng={rng!r} must be a numpy.random.Generator or an integer seed")


def _check_seed(value: int, what: str) -> int:
    if int(value) != value or value < 0:
        raise ConfigError(f"{what}={value} must be a non-negative integer")
    return int(value)


def _concat_ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenation of arange(s, s + l) for each (s, l), vectorised. int64."""
    starts = np.asarray(starts, dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    shift = np.repeat(starts - (np.cumsum(lengths) - lengths), lengths)
    return shift + np.arange(total, dtype=np.int64)


def _binary_sorted_csr(matrix: sp.spmatrix | sp.sparray) -> sp.csr_matrix:
    out = sp.csr_matrix(matrix, copy=True)
    out.sum_duplicates()
    out.eliminate_zeros()
    out.sort_indices()
    return out


def _csr_contains(matrix: sp.csr_matrix, rows: np.ndarray, items: np.ndarray) -> np.ndarray:
    """Boolean array (shape of items): is items[i, ...] a stored entry of row rows[i] of a
    canonical (sorted, duplicate-free) CSR matrix? rows broadcasts against items."""
    rows, items = np.broadcast_arrays(np.asarray(rows, np.int64), np.asarray(items, np.int64))
    n_cols = matrix.shape[1]
    entry_rows = np.repeat(np.arange(matrix.shape[0], dtype=np.int64), np.diff(matrix.indptr))
    keys = entry_rows * n_cols + matrix.indices.astype(np.int64)
    query = rows * n_cols + items
    pos = np.searchsorted(keys, query)
    pos_ok = np.minimum(pos, max(len(keys) - 1, 0))
    return (pos < len(keys)) & (keys[pos_ok] == query) if len(keys) else np.zeros(query.shape, bool)


# ---------------------------------------------------------------------------------------------
# real item sampling
# ---------------------------------------------------------------------------------------------


class NegativeSampler:
    """Draws the sampled items of every target of an evaluation set, block by block.

    target_users: int (T,) row (into `excluded`) of each target's user, in the canonical order.
    target_items: int (T,) item id of each target.
    pool: "all_but_target" (every item but the target) or "non_interacted" (items outside the
    user's row of `excluded`, which must contain the target; spec §4.9 "actual").
    excluded: CSR (n_rows x n_items), needed for "non_interacted" (fold-in ∪ all targets).
    `negatives(repeat, positions)` -> int64 (len(positions), sample_size - 1).
    """

    def __init__(
        self,
        seed: int,
        target_users: np.ndarray,
        target_items: np.ndarray,
        n_items: int,
        sample_size: int,
        replace: bool = True,
        pool: str = "all_but_target",
        excluded: sp.spmatrix | sp.sparray | None = None,
    ) -> None:
        check_sample_size(n_items, sample_size)
        check_pool(pool)
        if pool == "given":
            raise ConfigError("pool='given' uses EvalSet.negatives; nothing to draw "
                              "(use SampledRankHook(pool='given') or given_negatives)")
        self.seed = _check_seed(seed, "seed")
        self.n_items = int(n_items)
        self.sample_size = int(sample_size)
        self.replace = bool(replace)
        self.pool = pool
        self.target_users = np.asarray(target_users, dtype=np.int64)
        self.target_items = np.asarray(target_items, dtype=np.int64)
        if self.target_users.shape != self.target_items.shape or self.target_items.ndim != 1:
            raise ConfigError(
                f"target_users {self.target_users.shape} and target_items "
                f"{self.target_items.shape} must be 1-d arrays of the same length"
            )
        if self.target_items.size and (
            self.target_items.min() < 0 or self.target_items.max() >= n_items
        ):
            raise DataError(f"target item ids must lie in [0, {n_items - 1}]")
        n_neg = self.sample_size - 1
        if pool == "all_but_target":
            self._pool_sizes = np.full(len(self.target_items), self.n_items - 1, dtype=np.int64)
            self._excluded = None
        else:
            if excluded is None:
                raise ConfigError("pool='non_interacted' needs the excluded items (foldin) of "
                                  "each user; pass foldin=")
            if excluded.shape[1] != n_items:
                raise DataError(
                    f"excluded/foldin has {excluded.shape[1]} columns, expected n_items={n_items}"
                )
            self._excluded = _binary_sorted_csr(excluded)
            if self.target_users.size and self.target_users.max() >= self._excluded.shape[0]:
                raise DataError(
                    f"target user row {self.target_users.max()} is outside the excluded matrix "
                    f"({self._excluded.shape[0]} rows)"
                )
            if not np.all(_csr_contains(self._excluded, self.target_users, self.target_items)):
                raise DataError("pool='non_interacted': every target must be among its user's "
                                "excluded items (pass targets= as well as foldin=)")
            entry_rows = np.repeat(np.arange(self._excluded.shape[0], dtype=np.int64),
                                   np.diff(self._excluded.indptr))
            within_row = np.arange(self._excluded.nnz) - self._excluded.indptr[entry_rows]
            # c_i = e_i - i: number of pool items below the i-th excluded item of the row
            self._rank_keys = entry_rows * self.n_items + (
                self._excluded.indices.astype(np.int64) - within_row)
            self._pool_sizes = self.n_items - np.diff(self._excluded.indptr)[self.target_users]
        need = n_neg if not self.replace else 1
        short = self._pool_sizes < need
        if np.any(short):
            idx = int(np.flatnonzero(short)[0])
            raise DataError(
                f"target {idx} (user row {self.target_users[idx]}) has a pool of "
                f"{self._pool_sizes[idx]} items, fewer than the {need} needed for "
                f"sample_size={sample_size} with replace={replace}; lower sample_size or use "
                "replace=True / pool='all_but_target'"
            )
        self._cache: dict[tuple[int, int], np.ndarray] = {}

    @property
    def n_targets(self) -> int:
        return len(self.target_items)

    @property
    def block_targets(self) -> int:
        return block_targets(self.sample_size)

    @property
    def n_blocks(self) -> int:
        return -(-self.n_targets // self.block_targets)

    def block(self, repeat: int, block_index: int) -> np.ndarray:
        """Sampled items of the targets in block `block_index`: int64 (block length, n - 1)."""
        return self._cached_block(repeat, block_index).astype(np.int64, copy=False)

    def _cached_block(self, repeat: int, block_index: int) -> np.ndarray:
        """The block as drawn and cached: int32 (with replacement, n_items < 2**31) or int64."""
        repeat = _check_seed(repeat, "repeat")
        key = (repeat, int(block_index))
        if key not in self._cache:
            self._cache[key] = self._generate_block(repeat, int(block_index))
        return self._cache[key]

    def _generate_block(self, repeat: int, block_index: int) -> np.ndarray:
        lo = block_index * self.block_targets
        hi = min(lo + self.block_targets, self.n_targets)
        rng = np.random.default_rng(
            np.random.SeedSequence([self.seed, _SEED_TAG, repeat, block_index]))
        offsets = self._draw_offsets(rng, self._pool_sizes[lo:hi])
        return self._offsets_to_items(offsets, slice(lo, hi))

    def run(self, repeat: int, start: int, stop: int) -> np.ndarray:
        """Sampled items of the consecutive targets start..stop-1, which must lie in one block:
        integer (stop - start, n - 1) (int32 or int64), a read-only view of the cached block.
        Per repeat only that block stays cached."""
        size = self.block_targets
        b = start // size
        if not (0 <= start < stop <= min((b + 1) * size, self.n_targets)):
            raise ConfigError(f"targets {start}..{stop - 1} are not inside one sampling block "
                              f"of {size} targets (n_targets={self.n_targets})")
        view = self._cached_block(repeat, b)[start - b * size : stop - b * size]
        view.flags.writeable = False
        self._drop_stale(repeat, b)
        return view

    def _drop_stale(self, repeat: int, keep: int) -> None:
        for stale in [k for k in self._cache if k[0] == repeat and k[1] != keep]:
            del self._cache[stale]

    def negatives(self, repeat: int, positions: np.ndarray) -> np.ndarray:
        """Sampled items of the targets at canonical `positions`: int64 (len, n - 1). Per repeat,
        only the block of the last position stays cached (the next batch may continue it), so
        memory stays at one block per repeat."""
        positions = np.asarray(positions, dtype=np.int64)
        out = np.empty((len(positions), self.sample_size - 1), dtype=np.int64)
        if len(positions) == 0:
            return out
        size = self.block_targets
        block_of = positions // size
        for b in np.unique(block_of):
            sel = block_of == b
            out[sel] = self._cached_block(repeat, int(b))[positions[sel] - b * size]
        self._drop_stale(repeat, int(block_of[-1]))
        return out

    def all(self, repeat: int) -> np.ndarray:
        """Sampled items of every target: int64 (n_targets, n - 1) (not cached)."""
        repeat = _check_seed(repeat, "repeat")
        out = np.empty((self.n_targets, self.sample_size - 1), dtype=np.int64)
        size = self.block_targets
        for b in range(self.n_blocks):
            out[b * size : (b + 1) * size] = self._generate_block(repeat, b)
        return out

    def _draw_offsets(self, rng: np.random.Generator, pool_sizes: np.ndarray) -> np.ndarray:
        """Uniform positions x in [0, pool size) per row, (rows, n - 1); distinct within a row
        when sampling without replacement."""
        n_neg = self.sample_size - 1
        rows = len(pool_sizes)
        # with replacement and n_items < 2**31, draw int32: numpy generates bounded integers of a
        # range < 2**32 from the same 32-bit stream for int32 and int64 output, so the values are
        # identical (test_sample_stream_definition) at half the memory traffic; without
        # replacement later draws follow, so keep int64 there
        dtype = np.int32 if self.replace and self.n_items < 2**31 else np.int64
        if rows and np.all(pool_sizes == pool_sizes[0]):
            x = rng.integers(0, pool_sizes[0], size=(rows, n_neg), dtype=dtype)
        else:
            x = rng.integers(0, pool_sizes[:, None], size=(rows, n_neg), dtype=dtype)
        if self.replace or rows == 0:
            return x
        dense = 2 * n_neg > pool_sizes
        if not dense.any():
            return self._dedupe(rng, x, pool_sizes)
        sparse_rows = np.flatnonzero(~dense)
        if sparse_rows.size:
            x[sparse_rows] = self._dedupe(rng, x[sparse_rows], pool_sizes[sparse_rows])
        dense_rows = np.flatnonzero(dense)
        x[dense_rows] = self._dense_without_replacement(rng, pool_sizes[dense_rows])
        return x

    @staticmethod
    def _dedupe(rng: np.random.Generator, x: np.ndarray, pool_sizes: np.ndarray) -> np.ndarray:
        """Redraw repeated positions until every row is duplicate-free (in place; rows come back
        sorted). The redraw rule is symmetric under relabelling the pool, so the final set is a
        uniform (n-1)-subset."""
        x.sort(axis=1)
        rows = np.flatnonzero((x[:, 1:] == x[:, :-1]).any(axis=1))
        while rows.size:
            sub = x[rows]
            dup_row, dup_col = np.nonzero(sub[:, 1:] == sub[:, :-1])
            sub[dup_row, dup_col + 1] = rng.integers(0, pool_sizes[rows[dup_row]])
            sub.sort(axis=1)
            x[rows] = sub
            rows = rows[(sub[:, 1:] == sub[:, :-1]).any(axis=1)]
        return x

    def _dense_without_replacement(
        self, rng: np.random.Generator, pool_sizes: np.ndarray
    ) -> np.ndarray:
        """(n-1) smallest of pool-size uniform keys per row: a uniform subset, for n-1 > pool/2."""
        n_neg = self.sample_size - 1
        width = int(pool_sizes.max())
        chunk = max(1, _DENSE_FLOATS // width)
        out = np.empty((len(pool_sizes), n_neg), dtype=np.int64)
        for lo in range(0, len(pool_sizes), chunk):
            sizes = pool_sizes[lo : lo + chunk]
            keys = rng.random((len(sizes), width))
            keys[np.arange(width)[None, :] >= sizes[:, None]] = np.inf
            out[lo : lo + chunk] = np.argpartition(keys, n_neg - 1, axis=1)[:, :n_neg]
        return out

    def _offsets_to_items(self, x: np.ndarray, sel: slice) -> np.ndarray:
        """Map pool positions to item ids, skipping the target (or the user's excluded items)."""
        if self._excluded is None:
            return np.add(x, x >= self.target_items[sel][:, None], out=x)
        users = self.target_users[sel][:, None]
        if users.size == 0:
            return x
        # keys of rows outside [u0, u1] lie below u0·N or at/above (u1 + 1)·N, outside every
        # query: searching the block's own rows' keys (cache-resident) gives the same counts
        indptr = self._excluded.indptr
        k0, k1 = int(indptr[users.min()]), int(indptr[users.max() + 1])
        below = np.searchsorted(self._rank_keys[k0:k1], users * self.n_items + x, side="right")
        return np.add(x, below + (k0 - indptr[users]), out=x)


def draw_negatives(
    rng_seed: int,
    repeat: int,
    users: np.ndarray,
    target_items: np.ndarray,
    n_items: int,
    sample_size: int,
    replace: bool = True,
    pool: str = "all_but_target",
    foldin: sp.spmatrix | sp.sparray | None = None,
    targets: sp.spmatrix | sp.sparray | None = None,
) -> np.ndarray:
    """Sampled items of every target: int64 (n_targets, sample_size - 1), uniform over the pool,
    with or without replacement, never the target itself (spec §0.2).

    users: int (n_targets,) row of each target's user in `foldin` / `targets` (the canonical
    target order is the order of the arguments; use it unchanged for every model of a sweep).
    pool="non_interacted" excludes the user's fold-in row and all of the user's targets
    (foldin and targets are CSR n_rows x n_items). Seeded by (rng_seed, repeat) per block.
    """
    excluded = None
    if pool == "non_interacted":
        if foldin is None or targets is None:
            raise ConfigError(
                "pool='non_interacted' needs foldin= and targets= (CSR, users x items)")
        excluded = sp.csr_matrix(foldin) + sp.csr_matrix(targets)
    sampler = NegativeSampler(rng_seed, users, target_items, n_items, sample_size, replace, pool,
                              excluded)
    return sampler.all(repeat)


def canonical_targets(eval_set: EvalSet) -> tuple[np.ndarray, np.ndarray]:
    """(target_rows, target_items), int64 (T,): every stored entry of eval_set.targets in row-major
    order, sorted by item within a row (the canonical target order of sampled evaluation)."""
    targets = _binary_sorted_csr(eval_set.targets)
    rows = np.repeat(np.arange(targets.shape[0], dtype=np.int64), np.diff(targets.indptr))
    return rows, targets.indices.astype(np.int64)


def given_negatives(eval_set: EvalSet, target_rows: np.ndarray) -> np.ndarray:
    """The dataset's given sampled items (EvalSet.negatives, NCF: 99 per user) of each target:
    int64 (len(target_rows), n_negatives)."""
    if eval_set.negatives is None:
        raise DataError("pool='given' needs EvalSet.negatives (the dataset's sampled items, NCF); "
                        "this evaluation set has none")
    negatives = np.asarray(eval_set.negatives, dtype=np.int64)
    if negatives.ndim != 2 or negatives.shape[0] != eval_set.n_users:
        raise DataError(f"EvalSet.negatives has shape {negatives.shape}; expected "
                        f"({eval_set.n_users}, n_negatives)")
    return negatives[np.asarray(target_rows, dtype=np.int64)]


def _beaten_counts(scores: np.ndarray, keys: Any, rows: np.ndarray, items: np.ndarray,
                   target_scores: np.ndarray, negatives: Sequence[np.ndarray]) -> np.ndarray:
    """#{sampled j beating t} per sample set and target, items scored -inf never counting:
    int64 (len(negatives), T).

    scores: C-contiguous (B, n_items); rows, items, target_scores: (T,); negatives: one int64
    (T, n - 1) array per sample set (repeat). j beats t when s_j > s_t, or s_j == s_t and
    key_j < key_t (spec §0.3); keys are looked up on exact ties only. Works in chunks of
    consecutive targets, all sample sets at once, so that the few score rows of a chunk stay in
    cache while every repeat gathers from them."""
    n_sets = len(negatives)
    n_targets = len(rows)
    n_neg = negatives[0].shape[1] if n_sets else 0
    out = np.zeros((n_sets, n_targets), dtype=np.int64)
    if n_sets == 0 or n_targets == 0 or n_neg == 0:
        return out
    flat_scores = scores.reshape(-1)
    n_cols = scores.shape[1]
    chunk = max(1, _KERNEL_ENTRIES // (n_sets * n_neg))
    shape = (n_sets, min(chunk, n_targets), n_neg)
    index = np.empty(shape, dtype=np.int64)
    gathered = np.empty(shape, dtype=scores.dtype)
    compared = np.empty(shape, dtype=bool)
    row_offsets = rows * n_cols
    for lo in range(0, n_targets, chunk):
        hi = min(lo + chunk, n_targets)
        c = hi - lo
        idx, s_j, cmp = index[:, :c], gathered[:, :c], compared[:, :c]
        offsets = row_offsets[lo:hi, None]
        for k, negs in enumerate(negatives):
            np.add(negs[lo:hi], offsets, out=idx[k])
        # one sequential read of the chunk's score rows brings them into cache (the hardware
        # prefetcher cannot follow the random gather); indices are in range, "clip" avoids the
        # buffered out= of mode "raise"
        span = row_offsets[hi - 1] - row_offsets[lo]
        if 0 <= span <= _TOUCH_FLOATS:
            np.max(flat_scores[row_offsets[lo] : row_offsets[hi - 1] + n_cols])
        np.take(flat_scores, idx, out=s_j, mode="clip")
        s_t = target_scores[None, lo:hi, None]
        np.greater(s_j, s_t, out=cmp)
        out[:, lo:hi] = np.count_nonzero(cmp, axis=2)
        np.equal(s_j, s_t, out=cmp)
        if cmp.any():  # exact ties (rare for real-valued scores): compare keys there only
            tie_k, tie_t, tie_j = np.nonzero(cmp)
            tie_rows = rows[lo + tie_t]
            tie_items = idx[tie_k, tie_t, tie_j] - row_offsets[lo + tie_t]
            won = keys[tie_rows, tie_items] < keys[tie_rows, items[lo + tie_t]]
            won &= ~np.isneginf(s_j[tie_k, tie_t, tie_j])  # excluded items tie only at -inf
            np.add.at(out, (tie_k[won], lo + tie_t[won]), 1)
    return out


def sampled_ranks_from_scores(
    scores_batch: np.ndarray,
    keys_batch: Any,
    target_rows: np.ndarray,
    target_items: np.ndarray,
    negatives: np.ndarray,
    excluded_mask: np.ndarray | sp.spmatrix | sp.sparray | None = None,
) -> np.ndarray:
    """1-based rank of each target among itself and its sampled items: int64 (T,).

    scores_batch: (B, n_items) scores of the batch's users; keys_batch: their tie-break keys, a
    (B, n_items) array or any object indexable as keys[rows, items] (`linrec.eval.ranks.BatchKeys`,
    never densified here). target_rows: int (T,) row of each target in the batch; target_items:
    int (T,); negatives: int (T, n - 1) sampled item ids. Item j beats target t when s_j > s_t,
    or s_j == s_t and key_j < key_t (spec §0.3, `ranks.beats`), so r = 1 + #{sampled j beating t}.
    Excluded items never beat the target: excluded_mask (B, n_items), bool array or sparse, True
    where excluded; if None, items scored -inf (the evaluator's mask) count as excluded.
    """
    scores = np.asarray(scores_batch)
    if scores.ndim != 2 or tuple(getattr(keys_batch, "shape", ())) != scores.shape:
        raise ConfigError(f"scores {scores.shape} and keys {getattr(keys_batch, 'shape', None)} "
                          "must be equal 2-d shapes (B, n_items)")
    rows = np.asarray(target_rows, dtype=np.int64)
    items = np.asarray(target_items, dtype=np.int64)
    negatives = np.asarray(negatives, dtype=np.int64)
    if negatives.ndim != 2 or negatives.shape[0] != len(items) or rows.shape != items.shape:
        raise ConfigError(
            f"target_rows {rows.shape}, target_items {items.shape} and negatives "
            f"{negatives.shape} must be (T,), (T,) and (T, n - 1)"
        )
    if negatives.size and (negatives.min() < 0 or negatives.max() >= scores.shape[1]):
        raise DataError(f"sampled item ids must lie in [0, {scores.shape[1] - 1}]")
    if excluded_mask is None:
        scores = np.ascontiguousarray(scores)
        return 1 + _beaten_counts(scores, keys_batch, rows, items, scores[rows, items],
                                  [negatives])[0]
    n_cols = scores.shape[1]
    flat = rows[:, None] * n_cols + negatives
    neg_score = np.take(np.ascontiguousarray(scores).ravel(), flat)
    target_score = scores[rows, items][:, None]
    won = neg_score > target_score
    # keys only matter on exact ties (rare for real-valued scores): look them up there only
    tie_t, tie_j = np.nonzero(neg_score == target_score)
    if tie_t.size:
        won[tie_t, tie_j] = beats(
            neg_score[tie_t, tie_j], keys_batch[rows[tie_t], negatives[tie_t, tie_j]],
            target_score[tie_t, 0], keys_batch[rows[tie_t], items[tie_t]])
    # excluded items never beat the target: check only the sampled items that beat it
    win_t, win_j = np.nonzero(won)
    if win_t.size:
        if sp.issparse(excluded_mask):
            excluded = _csr_contains(_binary_sorted_csr(excluded_mask), rows[win_t],
                                     negatives[win_t, win_j])
        else:
            excluded = np.asarray(excluded_mask, dtype=bool)[rows[win_t], negatives[win_t, win_j]]
        won[win_t[excluded], win_j[excluded]] = False
    return 1 + won.sum(axis=1, dtype=np.int64)


class SampledRankHook:
    """Evaluator hook: sampled ranks of every target of `eval_set`, for each repeat.

    Called once per scoring batch as hook(rows, scores, keys, batch_ranks) (the protocol of
    `linrec.eval.evaluator`): rows int (B,) positions of the batch's users in eval_set, scores
    (B, n_items) (fold-in entries may be -inf or not), keys the batch's tie-break keys
    (`BatchKeys` or an array); batch_ranks is not used. Fold-in items and the user's other
    targets never beat a target (they rank below every candidate, spec §0.3). After the pass,
    `sampled_ranks` is int64 (n_repeats, n_targets) in the canonical target order
    (`canonical_targets`), `sample_size` the set size n (100 for NCF's given 99 negatives).

    Cost per batch: the batch's fold-in and target entries are set to -inf in `scores` for the
    duration of the call and restored before it returns (a copy is made when `scores` is
    read-only, not C-contiguous or not floating), so an excluded item can never beat a target
    with a finite score; then one gather of the sampled items' scores and one comparison for all
    repeats at once (`_beaten_counts`), keys looked up on exact ties only. Targets with a
    non-finite score fall back to `sampled_ranks_from_scores` with an explicit exclusion mask.
    """

    def __init__(
        self,
        eval_set: EvalSet,
        n_items: int,
        sample_size: int | None,
        seed: int,
        repeats: int = 1,
        replace: bool = True,
        pool: str = "all_but_target",
    ) -> None:
        check_pool(pool)
        if int(repeats) != repeats or repeats < 1:
            raise ConfigError(f"repeats={repeats} must be a positive integer")
        self.pool = pool
        self.repeats = int(repeats)
        self.target_rows, self.target_items = canonical_targets(eval_set)
        self._indptr = np.concatenate([[0], np.cumsum(np.bincount(
            self.target_rows, minlength=eval_set.n_users))]).astype(np.int64)
        self._excluded = _binary_sorted_csr(sp.csr_matrix(eval_set.foldin)
                                            + sp.csr_matrix(eval_set.targets))
        self._eval_set = eval_set
        if pool == "given":
            n_given = given_negatives(eval_set, np.zeros(0, dtype=np.int64)).shape[1]
            if self.repeats != 1:
                raise ConfigError(f"repeats={repeats}: pool='given' has one fixed sample set; "
                                  "use repeats=1")
            if sample_size not in (None, n_given + 1):
                raise ConfigError(f"sample_size={sample_size} does not match the "
                                  f"{n_given} given negatives per user (sample_size={n_given + 1})")
            given = np.asarray(eval_set.negatives)
            if given.size and (given.min() < 0 or given.max() >= n_items):
                raise DataError(f"EvalSet.negatives holds item ids in [{given.min()}, "
                                f"{given.max()}]; allowed: [0, n_items - 1 = {n_items - 1}]")
            self.sample_size = n_given + 1
            self._sampler = None
        else:
            if sample_size is None:
                raise ConfigError(f"sample_size is required for pool={pool!r}")
            self.sample_size = int(sample_size)
            self._sampler = NegativeSampler(seed, self.target_rows, self.target_items, n_items,
                                            self.sample_size, replace, pool, self._excluded)
        self.sampled_ranks = np.zeros((self.repeats, len(self.target_items)), dtype=np.int64)

    def _negatives(self, repeat: int, positions: np.ndarray, user_rows: np.ndarray) -> np.ndarray:
        if self._sampler is None:
            return given_negatives(self._eval_set, user_rows)
        return self._sampler.negatives(repeat, positions)

    def _pieces(self, positions: np.ndarray, user_rows: np.ndarray):
        """Yield (slice into positions, [sampled items of each repeat]). A run of consecutive
        positions (the evaluator's batches) is cut at the sampling blocks' boundaries, so every
        repeat's sampled items are views of cached blocks; anything else comes in one piece."""
        n = len(positions)
        contiguous = n > 0 and int(positions[-1]) - int(positions[0]) + 1 == n and bool(
            np.all(np.diff(positions) == 1))
        if self._sampler is None or not contiguous:
            yield slice(0, n), [self._negatives(r, positions, user_rows)
                                for r in range(self.repeats)]
            return
        size, first = self._sampler.block_targets, int(positions[0])
        bounds = [first, *range((first // size + 1) * size, first + n, size), first + n]
        for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
            yield slice(lo - first, hi - first), [self._sampler.run(r, lo, hi)
                                                  for r in range(self.repeats)]

    def __call__(self, rows: np.ndarray, scores: np.ndarray, keys: Any, *_: Any,
                 **__: Any) -> None:
        rows = np.asarray(rows, dtype=np.int64)
        counts = self._indptr[rows + 1] - self._indptr[rows]
        positions = _concat_ranges(self._indptr[rows], counts)
        batch_rows = np.repeat(np.arange(len(rows), dtype=np.int64), counts)
        items = self.target_items[positions]
        scores = np.asarray(scores)
        if scores.ndim != 2 or scores.shape[0] != len(rows):
            raise ConfigError(f"scores {scores.shape} must be (len(rows)={len(rows)}, n_items)")
        # fold-in ∪ targets of the batch's users, as (batch row, item) pairs
        indptr = self._excluded.indptr
        lengths = indptr[rows + 1] - indptr[rows]
        excluded_items = self._excluded.indices[_concat_ranges(indptr[rows], lengths)]
        excluded_rows = np.repeat(np.arange(len(rows), dtype=np.int64), lengths)
        target_scores = scores[batch_rows, items]
        if not np.all(np.isfinite(target_scores)):
            mask = sp.csr_matrix((np.ones(len(excluded_items), dtype=bool),
                                  (excluded_rows, excluded_items)), shape=scores.shape)
            for repeat in range(self.repeats):
                self.sampled_ranks[repeat, positions] = sampled_ranks_from_scores(
                    scores, keys, batch_rows, items,
                    self._negatives(repeat, positions, rows[batch_rows]), mask)
            return
        floating = np.issubdtype(scores.dtype, np.floating)
        in_place = floating and scores.flags.writeable and scores.flags.c_contiguous
        work = scores if in_place else np.array(scores, order="C",
                                                dtype=None if floating else np.float64)
        saved = work[excluded_rows, excluded_items]
        work[excluded_rows, excluded_items] = -np.inf
        try:
            for piece, negatives in self._pieces(positions, rows[batch_rows]):
                self.sampled_ranks[:, positions[piece]] = 1 + _beaten_counts(
                    work, keys, batch_rows[piece], items[piece], target_scores[piece], negatives)
        finally:
            if in_place:
                work[excluded_rows, excluded_items] = saved

    def result(self) -> np.ndarray:
        """sampled_ranks (n_repeats, n_targets); raises DataError if some target was not scored."""
        missing = self.sampled_ranks == 0
        if np.any(missing):
            raise DataError(f"{int(missing[0].sum())} targets were never scored by the batch pass")
        return self.sampled_ranks


# ---------------------------------------------------------------------------------------------
# simulation from global ranks (spec §2.4) and adaptive sampling (spec §8.2, §8.5)
# ---------------------------------------------------------------------------------------------


def simulate_sampled_ranks(
    global_ranks: np.ndarray,
    n_items: int | np.ndarray,
    sample_size: int,
    replace: bool = True,
    rng: np.random.Generator | int | None = None,
) -> np.ndarray:
    """Sampled ranks drawn from their exact law given the global ranks (spec §2.4): int64, shape of
    global_ranks. With replacement r = 1 + Binomial(n-1, θ_R), θ_R = (R-1)/(N-1); without
    r = 1 + Hypergeometric(N-1 items, R-1 above the target, n-1 draws). n_items may be an array
    (per-target pool sizes N_u for pool="non_interacted"). rng: a Generator (or an integer seed)
    derived from the run seed; required."""
    n_arr = np.asarray(n_items, dtype=np.int64)
    check_sample_size(int(n_arr.min()) if n_arr.size else 3, sample_size)
    ranks = check_ranks(global_ranks, n_arr, "global_ranks")
    rng = _as_rng(rng)
    n_neg = sample_size - 1
    if replace:
        theta = (ranks - 1) / (n_arr - 1)
        return 1 + rng.binomial(n_neg, theta)
    n_arr = np.broadcast_to(n_arr, ranks.shape)
    return 1 + rng.hypergeometric(ranks - 1, n_arr - ranks, n_neg)


def adaptive_levels(
    n_items: int, n0: int = 100, n_max: int = 3200, n_max_frac: float | None = None
) -> np.ndarray:
    """Set sizes n_j = n0·2^j, j = 0..t, of adaptive sampling (spec §8.2, §8.5): n_max must be
    n0·2^t; the terminal size is clipped to the largest n0·2^t <= N - 1 (or <= frac·N with
    n_max_frac, the [S3] 10–15 % rule). int64 (t + 1,)."""
    if int(n0) != n0 or not 2 <= n0 <= n_items - 1:
        raise ConfigError(f"n0={n0} must be an integer in [2, n_items - 1] = [2, {n_items - 1}]")
    if int(n_max) != n_max or n_max < n0 or (n_max // n0) * n0 != n_max or (
            (n_max // n0) & (n_max // n0 - 1)):
        raise ConfigError(f"n_max={n_max} must be n0·2^t for an integer t >= 0 (n0={n0})")
    cap = min(int(n_max), n_items - 1)
    if n_max_frac is not None:
        if not 0.0 < n_max_frac <= 1.0:
            raise ConfigError(f"n_max_frac={n_max_frac} must be in (0, 1] (e.g. 0.10–0.15)")
        cap = min(n_items - 1, int(np.floor(n_max_frac * n_items)))
        if cap < n0:
            raise ConfigError(f"n_max_frac={n_max_frac}·n_items={n_items} is below n0={n0}")
    sizes = [int(n0)]
    while sizes[-1] * 2 <= cap:
        sizes.append(sizes[-1] * 2)
    return np.asarray(sizes, dtype=np.int64)


@dataclass(frozen=True)
class AdaptiveSample:
    """Outcome of adaptive sampling: sampled_ranks r_u and sample_sizes n_u (set sizes,
    target included), int64 (M,); levels: the set sizes n0·2^j, j = 0..t."""

    sampled_ranks: np.ndarray
    sample_sizes: np.ndarray
    levels: np.ndarray

    @property
    def mean_sample_size(self) -> float:
        return float(self.sample_sizes.mean()) if self.sample_sizes.size else 0.0


def simulate_adaptive_ranks(
    global_ranks: np.ndarray,
    n_items: int,
    rng: np.random.Generator | int | None = None,
    n0: int = 100,
    n_max: int = 3200,
    n_max_frac: float | None = None,
    replace: bool = True,
) -> AdaptiveSample:
    """Algorithm 1 of spec §8.2 simulated from global ranks, exact in distribution: start with
    n0 - 1 sampled items; while r_u = 1 and n_u < n_max, add n_u items (nested sets) and double n_u.
    With replacement the added items beat the target with probability θ_R each; without
    replacement they come from the pool minus the n_u - 1 items already drawn (all below t).
    rng: a Generator (or an integer seed) derived from the run seed; required."""
    levels = adaptive_levels(n_items, n0, n_max, n_max_frac)
    ranks = check_ranks(global_ranks, n_items, "global_ranks")
    rng = _as_rng(rng)
    flat = ranks.ravel()
    above = flat - 1  # items that beat the target
    below = n_items - flat  # items the target beats
    sampled = np.empty(flat.shape, dtype=np.int64)
    sizes = np.empty(flat.shape, dtype=np.int64)
    active = np.arange(flat.size)
    drawn_before = 0  # sampled items in the set before this level's draw
    for j, size in enumerate(levels):
        n_draw = int(size) - 1 - drawn_before
        if replace:
            n_above = rng.binomial(n_draw, above[active] / (n_items - 1))
        else:
            # spec §8.2: given r = 1 so far, every earlier draw came from the items below t
            n_above = rng.hypergeometric(above[active], below[active] - drawn_before, n_draw)
        sampled[active] = 1 + n_above
        sizes[active] = size
        drawn_before = int(size) - 1
        if j + 1 < len(levels):
            active = active[n_above == 0]
    return AdaptiveSample(sampled.reshape(ranks.shape), sizes.reshape(ranks.shape), levels)


@dataclass(frozen=True)
class EfficiencyCurve:
    """Sampling efficiency of an adaptive run (spec §8.5).

    levels: set sizes n_j (t + 1,); finished: m_j, users whose final size is n_j (t + 1,);
    cost: C_j for the non-terminal levels j = 0..t-1 (items drawn at level j per user resolved
    there; inf when none resolved); terminal_cost: C_t computed with the users resolved (r > 1) at
    n_max only; terminal_unresolved: users still at r = 1 at n_max.
    """

    levels: np.ndarray
    finished: np.ndarray
    cost: np.ndarray
    terminal_cost: float
    terminal_unresolved: int


def efficiency_curve(sample: AdaptiveSample) -> EfficiencyCurve:
    """C_0 = M n0 / m_0 and C_j = (M - Σ_{p<j} m_p)(n_j - n_{j-1}) / m_j (spec §8.5 eq 13)."""
    levels = sample.levels
    sizes = sample.sample_sizes.ravel()
    ranks = sample.sampled_ranks.ravel()
    n_users = sizes.size
    finished = np.array([(sizes == s).sum() for s in levels], dtype=np.int64)
    reached = n_users - np.concatenate([[0], np.cumsum(finished)[:-1]])
    drawn = np.concatenate([[levels[0]], np.diff(levels)]).astype(np.float64)
    terminal_resolved = int(((sizes == levels[-1]) & (ranks > 1)).sum())
    resolved = np.concatenate([finished[:-1], [terminal_resolved]]).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        all_cost = np.where(resolved > 0, reached * drawn / resolved, np.inf)
    return EfficiencyCurve(
        levels=levels,
        finished=finished,
        cost=all_cost[:-1],
        terminal_cost=float(all_cost[-1]),
        terminal_unresolved=int(finished[-1] - terminal_resolved),
    )
