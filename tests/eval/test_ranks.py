"""Global ranks (ARCHITECTURE §3, docs/concepts/evaluation.md, ties) against a per-user brute
force."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from linrec.data.splits import EvalSet
from linrec.errors import ConfigError, DataError, MemoryBudgetError
from linrec.eval import ranks as ranks_module
from linrec.eval.ranks import (
    BatchKeys,
    RankTable,
    batch_global_ranks,
    global_ranks,
    score_batches,
    table_from_batch,
    tie_break_keys,
    tie_break_keys_at,
)
from tests.conftest import LinearScores, make_evalset
from tests.eval.conftest import brute_force_ranks, rank_dict

# --------------------------------------------------------------------------- tie-break keys


def test_keys_dense_equals_pairwise_and_are_distinct_per_user():
    users = np.array([0, 5, 2**40, 7])
    dense = tie_break_keys(11, users, 300)
    assert dense.dtype == np.uint64 and dense.shape == (4, 300)
    pairs = tie_break_keys_at(11, users[:, None], np.arange(300)[None, :])
    np.testing.assert_array_equal(dense, pairs)
    assert all(len(np.unique(row)) == 300 for row in dense)
    assert not np.array_equal(dense, tie_break_keys(12, users, 300))
    assert not np.array_equal(dense[0], dense[3])


def test_keys_depend_only_on_seed_user_item():
    a = tie_break_keys(3, np.array([4, 9]), 50)
    b = tie_break_keys(3, np.array([9, 1, 4]), 50)
    np.testing.assert_array_equal(a[0], b[2])
    np.testing.assert_array_equal(a[1], b[0])
    # roughly uniform: the mean of the top bit over many keys is near 1/2
    top = tie_break_keys(3, np.arange(200), 500) >> np.uint64(63)
    assert abs(top.mean() - 0.5) < 0.01


def test_batch_keys_lazy_and_dense_agree():
    keys = BatchKeys(5, np.array([3, 8, 1]), 40)
    rows, items = np.array([[0], [2]]), np.array([[1, 7, 39]])
    np.testing.assert_array_equal(keys[rows, items],
                                  tie_break_keys_at(5, np.array([[3], [1]]), items))
    dense = np.asarray(keys)
    np.testing.assert_array_equal(dense, tie_break_keys(5, np.array([3, 8, 1]), 40))
    np.testing.assert_array_equal(keys[rows, items], dense[rows, items])


@pytest.mark.parametrize("seed", [-1, 2**64, 1.5, True])
def test_bad_seed(seed):
    with pytest.raises(ConfigError, match="seed"):
        tie_break_keys(seed, np.array([0]), 3)


# --------------------------------------------------------------------------- ranks


@pytest.fixture(params=["linear", "sorted", "vectorised", "vectorised in chunks"])
def kernel_path(request, monkeypatch):
    """Every counting path: the compiled kernel's two (chosen by the number of targets of a
    row) and NumPy's vectorised comparisons of a small batch, whole and a few held-out items
    at a time."""
    vectorised = request.param.startswith("vectorised")
    monkeypatch.setattr(ranks_module, "_KERNEL_MIN_PAIRS", 2**62 if vectorised else 0)
    monkeypatch.setattr(ranks_module, "_LINEAR_MAX_TARGETS", 10**9 if request.param == "linear"
                        else 0)
    if request.param == "vectorised in chunks":
        monkeypatch.setattr(ranks_module, "_HOST_CHUNK_ELEMENTS", 100)
    return request.param


@pytest.mark.parametrize("case", range(12))
def test_batch_ranks_match_brute_force(case, kernel_path):
    rng = np.random.default_rng(case)
    n_users, n_items = int(rng.integers(1, 15)), int(rng.integers(3, 70))
    evalset = make_evalset(n_users, n_items, seed=case, foldin_p=rng.uniform(0, 0.6))
    scores = rng.normal(size=(n_users, n_items))
    if case % 2:
        scores = np.round(scores, 0)  # heavy ties
    if case % 3 == 0:
        scores = scores.astype(np.float32)
    if case % 4 == 3:
        scores[: n_users // 2] = 0.0  # every item tied
    original = scores.copy()
    keys = BatchKeys(9, evalset.users, n_items)
    batch = batch_global_ranks(scores, evalset.foldin, evalset.targets, keys)
    got = rank_dict(batch)
    assert got == brute_force_ranks(original, evalset, 9)
    # scores: fold-in -inf, everything else untouched; target scores reported
    foldin = evalset.foldin.toarray() > 0
    assert np.all(np.isneginf(scores[foldin]))
    np.testing.assert_array_equal(scores[~foldin], original[~foldin])
    np.testing.assert_array_equal(batch.target_scores, original[batch.rows, batch.items])
    # n_candidates and sorting by (row, rank)
    n_cand = n_items - foldin.sum(1) - (evalset.targets.toarray() > 0).sum(1) + 1
    np.testing.assert_array_equal(batch.n_candidates, n_cand[batch.rows])
    assert np.all(batch.ranks <= batch.n_candidates)
    assert np.all(np.lexsort((batch.ranks, batch.rows)) == np.arange(len(batch.ranks)))


@pytest.mark.parametrize("case", ["targets tie each other", "one target", "many targets",
                                  "fold-in ties the targets", "no targets in some rows",
                                  "non-contiguous float16"])
def test_kernel_paths(case, kernel_path):
    """Every path of the compiled kernel: targets tied with each other and with candidates and
    fold-in items (the tied-key count and what excluded items counted taken out), one target,
    a target per item, rows without targets, and scores that need a converted copy."""
    rng = np.random.default_rng(len(case))
    n_users, n_items = 9, 40
    evalset = make_evalset(n_users, n_items, seed=1, min_targets=3)
    targets, foldin = evalset.targets.toarray() > 0, evalset.foldin.toarray() > 0
    scores = np.round(rng.normal(size=(n_users, n_items)), 1)
    if case == "targets tie each other":
        scores[targets] = 0.5
    if case == "one target":
        targets[:] = False
        targets[np.arange(n_users), rng.integers(0, n_items, n_users)] = True
        foldin &= ~targets
    if case == "many targets":
        targets = ~foldin
    if case == "fold-in ties the targets":
        scores[foldin] = 0.5
        scores[targets] = 0.5
    if case == "no targets in some rows":
        targets[::2] = False
    evalset = EvalSet(evalset.users, sp.csr_matrix(foldin.astype(np.float32)),
                      sp.csr_matrix(targets.astype(np.float32)))
    expected = brute_force_ranks(scores, evalset, 4)
    if case == "non-contiguous float16":
        scores = np.asfortranarray(scores.astype(np.float16))
        expected = brute_force_ranks(scores.astype(np.float32), evalset, 4)
    original = scores.copy()
    batch = batch_global_ranks(scores, evalset.foldin, evalset.targets,
                               BatchKeys(4, evalset.users, n_items))
    assert rank_dict(batch) == expected
    assert np.all(np.isneginf(scores[foldin]))  # the caller's array is masked, even a copy's
    np.testing.assert_array_equal(scores[~foldin], original[~foldin])


def test_extreme_scores(kernel_path):
    """Huge, tiny and signed-zero scores keep exact order."""
    evalset = make_evalset(4, 30, seed=3, min_targets=2)
    rng = np.random.default_rng(3)
    values = np.array([-3e38, -1e-30, -0.0, 0.0, 1e-45, 1e-30, 2.5, 3e38], dtype=np.float32)
    scores = values[rng.integers(0, len(values), size=(4, 30))]
    expected = brute_force_ranks(scores, evalset, 1)
    batch = batch_global_ranks(scores.copy(), evalset.foldin, evalset.targets,
                               BatchKeys(1, evalset.users, 30))
    got = rank_dict(batch)
    assert got == expected


@pytest.mark.parametrize("users_known", [True, False])
def test_global_ranks_independent_of_batch_size(users_known):
    evalset = make_evalset(23, 50, seed=4)
    model = LinearScores(50, decimals=0)
    tables = [global_ranks(model, evalset, seed=2, users_known=users_known, batch_size=b)
              for b in (1, 4, 23, 100)]
    for table in tables[1:]:
        for name in ("rows", "users", "items", "ranks", "n_candidates"):
            np.testing.assert_array_equal(getattr(table, name), getattr(tables[0], name))
    scores = model.score(evalset.foldin, evalset.users if users_known else None)
    assert rank_dict(tables[0]) == brute_force_ranks(scores, evalset, 2)
    np.testing.assert_array_equal(tables[0].users, evalset.users[tables[0].rows])
    assert len(tables[0]) == evalset.targets.nnz


def test_score_batches_passes_users_and_sizes_batches():
    evalset = make_evalset(10, 20, seed=5)
    model = LinearScores(20)
    model.seen_users.clear()
    slices = [rows for rows, _ in score_batches(model, evalset, users_known=True, batch_size=4)]
    assert slices == [slice(0, 4), slice(4, 8), slice(8, 10)]
    np.testing.assert_array_equal(np.concatenate(model.seen_users), evalset.users)
    model.seen_users.clear()
    list(score_batches(model, evalset, users_known=False, batch_size=4))
    assert model.seen_users == [None, None, None]
    # budget of 1 MiB and 16 bytes per cell: 2**20 / (20 * 16) = 3276 rows -> one batch
    assert len(list(score_batches(model, evalset, users_known=False, memory_budget_mb=1))) == 1
    sizes = [s.shape[0] for _, s in score_batches(model, evalset, users_known=False,
                                                  memory_budget_mb=20 * 16 * 3 / 2**20)]
    assert sizes == [3, 3, 3, 1]


def test_bad_inputs():
    evalset = make_evalset(5, 12, seed=6, min_targets=1)
    model = LinearScores(12)
    with pytest.raises(MemoryBudgetError, match="memory_budget_mb"):
        list(score_batches(model, evalset, users_known=False, memory_budget_mb=1e-6))
    with pytest.raises(ConfigError, match="batch_size"):
        list(score_batches(model, evalset, users_known=False, batch_size=0))
    for row, bad in ((2, np.nan), (3, np.inf), (4, -np.inf)):
        for item in range(12):  # a target, a fold-in item or a candidate: all refused
            scores = np.zeros((5, 12))
            scores[row, item] = bad
            with pytest.raises(DataError, match=f"row {row}"):
                batch_global_ranks(scores, evalset.foldin, evalset.targets,
                                   BatchKeys(0, evalset.users, 12))
    overlap = sp.csr_matrix(evalset.foldin + evalset.targets)
    with pytest.raises(DataError, match="disjoint"):
        batch_global_ranks(np.zeros((5, 12)), overlap, evalset.targets,
                           BatchKeys(0, evalset.users, 12))

    class WrongShape(LinearScores):
        def score(self, foldin, users=None):
            return np.zeros((foldin.shape[0], 3))

    with pytest.raises(DataError, match="shape"):
        global_ranks(WrongShape(12), evalset, seed=0, users_known=False)


def test_rank_table_npz_roundtrip(tmp_path):
    evalset = make_evalset(7, 25, seed=7)
    table = global_ranks(LinearScores(25), evalset, seed=1, users_known=False)
    path = tmp_path / "ranks.npz"
    table.save_npz(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ranks.npz"]
    with np.load(path) as data:
        assert {"user", "item", "rank"} <= set(data.files)
    loaded = RankTable.load_npz(path)
    for name in ("rows", "users", "items", "ranks", "n_candidates"):
        np.testing.assert_array_equal(getattr(loaded, name), getattr(table, name))
        assert getattr(loaded, name).dtype == getattr(table, name).dtype
    assert loaded.n_items == 25
    np.savez(tmp_path / "bad.npz", user=table.users)
    with pytest.raises(DataError, match="missing"):
        RankTable.load_npz(tmp_path / "bad.npz")


@pytest.mark.parametrize("layout", ["fortran", "int", "float16", "readonly"])
def test_score_layouts_and_dtypes(layout):
    """Fortran-ordered, integer, half-precision and read-only score arrays rank like the brute
    force on the same values (non-float and half scores are ranked as float64)."""
    evalset = make_evalset(8, 30, seed=8, min_targets=2)
    base = LinearScores(30, decimals=0)

    class Variant(LinearScores):
        def score(self, foldin, users=None):
            scores = base.score(foldin, users)
            if layout == "fortran":
                return np.asfortranarray(scores)
            if layout == "int":
                return scores.astype(np.int64)
            if layout == "float16":
                return scores.astype(np.float16)
            scores.flags.writeable = False
            return scores

    table = global_ranks(Variant(30), evalset, seed=3, users_known=False, batch_size=3)
    values = base.score(evalset.foldin)
    if layout == "float16":
        values = values.astype(np.float16).astype(np.float64)
    assert rank_dict(table) == brute_force_ranks(values, evalset, 3)


def test_every_path_refuses_a_non_finite_first_row_and_keeps_the_table_types(kernel_path):
    """Row 0 holding NaN or inf is refused as row 0 by every counting path; the batch's arrays
    have their documented types (rows, ranks and candidate counts int64, items int32) whatever
    the scores' dtype and layout (float16, a non-contiguous float32); duplicated or unsorted
    CSR entries count once, as in their canonical form."""
    evalset = make_evalset(6, 25, seed=8, min_targets=2)
    keys = BatchKeys(3, evalset.users, 25)
    for bad in (np.nan, np.inf):
        scores = np.zeros((6, 25))
        scores[0, 7] = bad
        with pytest.raises(DataError, match="batch row 0 "):
            batch_global_ranks(scores, evalset.foldin, evalset.targets, keys)
    rng = np.random.default_rng(8)
    base = np.round(rng.normal(size=(6, 25)), 1)
    expected = brute_force_ranks(base.astype(np.float16).astype(np.float32), evalset, 3)
    for scores in (base.astype(np.float16), np.asfortranarray(base.astype(np.float32)),
                   base.astype(np.float32)):
        if scores.dtype == np.float32:
            expected = brute_force_ranks(scores, evalset, 3)
        batch = batch_global_ranks(scores.copy(), evalset.foldin, evalset.targets, keys)
        assert rank_dict(batch) == expected
        assert (batch.rows.dtype, batch.ranks.dtype, batch.n_candidates.dtype,
                batch.items.dtype) == (np.int64, np.int64, np.int64, np.int32)
    # a float64 batch that is not C-contiguous keeps its precision: scores 1e-12 apart rank apart
    close = np.asfortranarray(np.ones((6, 25)) + np.arange(25) * 1e-12)
    expected = brute_force_ranks(np.ascontiguousarray(close), evalset, 3)
    batch = batch_global_ranks(close.copy(order="F"), evalset.foldin, evalset.targets, keys)
    assert rank_dict(batch) == expected
    t = evalset.targets  # each row's targets stored twice: reversed, then in order
    indices = np.concatenate([np.r_[t.indices[a:b][::-1], t.indices[a:b]]
                              for a, b in zip(t.indptr[:-1], t.indptr[1:], strict=True)])
    twice = sp.csr_matrix((np.ones(len(indices), np.float32), indices, 2 * t.indptr),
                          shape=t.shape)
    assert not twice.has_canonical_format
    scores = base.astype(np.float32)
    batch = batch_global_ranks(scores.copy(), evalset.foldin, twice, keys)
    assert rank_dict(batch) == brute_force_ranks(scores, evalset, 3)


def test_the_batch_loop_adds_its_times_and_passes_its_settings_on(monkeypatch):
    """On a clock that ticks once per reading, the loop adds one tick of scoring per batch (and
    one for the call that finds no batch left) and one of ranking per batch to the caller's
    dict; the batch size and the memory budget reach the scoring; the table keeps the catalogue
    size; a model's wrong shape is named with its class."""
    from linrec.errors import MemoryBudgetError
    from linrec.eval.ranks import ranked_batches

    class Clock:
        now = 0.0

        def perf_counter(self):
            self.now += 1.0
            return self.now

    evalset = make_evalset(7, 20, seed=9, min_targets=1)
    seen = []

    class Recording(LinearScores):
        def score(self, foldin, users=None):
            seen.append(foldin.shape[0])
            return super().score(foldin, users)

    monkeypatch.setattr(ranks_module, "time", Clock())
    timings = {"score": 10.0, "rank": 20.0}
    batches = list(ranked_batches(Recording(20), evalset, seed=0, users_known=False,
                                  batch_size=2, timings=timings))
    assert seen == [2, 2, 2, 1] and len(batches) == 4
    assert timings == {"score": 10.0 + 5, "rank": 20.0 + 4}
    assert all(b.scores is not None for b in batches)  # host scores by default
    assert table_from_batch(batches[0], evalset.users, 20).n_items == 20
    empty = RankTable.concat([], 20)  # no batch: empty arrays of the table's own types
    assert [getattr(empty, name).dtype for name in
            ("rows", "users", "items", "ranks", "n_candidates")] == [
        np.int64, np.int64, np.int32, np.int64, np.int64]
    fresh: dict[str, float] = {}
    list(ranked_batches(LinearScores(20), evalset, seed=0, users_known=False, batch_size=7,
                        timings=fresh))
    assert fresh == {"score": 2.0, "rank": 1.0}
    table = global_ranks(Recording(20), evalset, seed=0, users_known=False, batch_size=3)
    assert seen[4:] == [3, 3, 1] and table.n_items == 20
    with pytest.raises(MemoryBudgetError, match="memory_budget_mb"):
        global_ranks(LinearScores(20), evalset, seed=0, users_known=False,
                     memory_budget_mb=1e-6)

    class WrongShape(LinearScores):
        def score(self, foldin, users=None):
            return np.zeros((foldin.shape[0], 3))

    with pytest.raises(DataError, match="WrongShape"):
        global_ranks(WrongShape(20), evalset, seed=0, users_known=False)
