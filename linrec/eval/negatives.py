"""Real item sampling for sampled evaluation (Li et al. 2020, §2.1; docs/concepts/evaluation.md,
ties): the sampled items of every held-out target, seeded per (run seed, repeat, block), and the
dataset's given negatives.

Sample sets are drawn in fixed blocks of consecutive targets (`block_targets(sample_size)`, about
BLOCK_ENTRIES item ids each) of the canonical target order (row-major order of
`EvalSet.targets`, `canonical_targets`), each block from its own `numpy.random.Generator`: they
depend on the seed, the repeat and the evaluation data only, never on the model or on the batch
size of the scoring pass.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from linrec.data.splits import EvalSet
from linrec.errors import ConfigError, DataError
from linrec.eval._checks import check_pool, check_sample_size
from linrec.eval._sparse import binary_sorted_csr, csr_contains
from linrec.params import check_seed

#: item ids per independently seeded block of draws (part of the sampling definition: changing it
#: changes every sample set); a block holds block_targets(sample_size) consecutive targets
BLOCK_ENTRIES = 1 << 17
#: domain tag mixed into every sampling seed, so that the same run seed used elsewhere gives
#: different streams
_SEED_TAG = 0x5A3D_17E5
#: dense-row budget (floats) of the without-replacement fallback used when n-1 > pool/2
_DENSE_FLOATS = 1 << 23


def block_targets(sample_size: int) -> int:
    """Targets per seeded block of draws: max(1, BLOCK_ENTRIES // (sample_size - 1))."""
    return max(1, BLOCK_ENTRIES // max(int(sample_size) - 1, 1))



class NegativeSampler:
    """Draws the sampled items of every target of an evaluation set, block by block.

    target_users: int (T,) row (into `excluded`) of each target's user, in the canonical order.
    target_items: int (T,) item id of each target.
    pool: "all_but_target" (every item but the target) or "non_interacted" (items outside the
    user's row of `excluded`, which must contain the target; Li et al. 2020, Tables 5–6 "actual").
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
        self.seed = check_seed(seed, "seed")
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
            self._excluded = binary_sorted_csr(excluded)
            if self.target_users.size and self.target_users.max() >= self._excluded.shape[0]:
                raise DataError(
                    f"target user row {self.target_users.max()} is outside the excluded matrix "
                    f"({self._excluded.shape[0]} rows)"
                )
            if not np.all(csr_contains(self._excluded, self.target_users, self.target_items)):
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
        repeat = check_seed(repeat, "repeat")
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
        repeat = check_seed(repeat, "repeat")
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
    with or without replacement, never the target itself (Li et al. 2020, §2.1).

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
    targets = binary_sorted_csr(eval_set.targets)
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

