"""The closed-form models with `device` set (linrec.models.device): the item-item family and
the spectral filters against the same independent solves as their CPU tests, on a CUDA device
where there is one and otherwise on CPU tensors (the device path's own code, with only the
CUDA lookup replaced); the guards that keep a fit from starting where it cannot finish."""

from __future__ import annotations

import types

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from linrec.errors import ConfigError, MemoryBudgetError
from linrec.models import als as als_module
from linrec.models import device as device_module
from linrec.models import ease as ease_module
from linrec.models import linalg
from linrec.models import spectral as spectral_module
from linrec.models.als import IALS, DebiasedIALS
from linrec.models.ease import DLAE, EASE, EDLAE, DebiasedEASE, LowRankEDLAE
from linrec.models.linalg import NotPositiveDefiniteError
from linrec.models.mf import MF
from linrec.models.spectral import LRR, ClosedFormMF, PureSVD, clear_spectrum_cache
from tests.models.conftest import (
    binary_matrix,
    brute_item_factors,
    brute_user_factors,
    random_binary,
    sized_advice_ease,
    zero_diag_column_solve,
)

TOL = 1e-10


@pytest.fixture(params=["cpu tensors", "cuda"])
def target(request, monkeypatch) -> str:
    """The `device` a model is given: "cuda" on a CUDA device, or "cuda" resolved to CPU
    tensors where there is none (every other step of the device path runs as it is)."""
    if request.param == "cuda":
        if not torch.cuda.is_available():
            pytest.skip("no CUDA device")
        return "cuda"

    def on_cpu_tensors(name: str, owner: str) -> torch.device:
        device_module.check_device_name(name, owner)
        return torch.device("cpu")

    for module in (ease_module, spectral_module, als_module):
        monkeypatch.setattr(module, "torch_device", on_cpu_tensors)
    return "cuda"


@pytest.fixture(scope="module")
def X() -> sp.csr_matrix:
    return binary_matrix(120, 25, 0.2, seed=0)


def test_ease_on_the_device_is_the_columnwise_constrained_ridge(X, target):
    lam = 7.0
    model = EASE(lam=lam, dtype="float64", device=target).fit(X)
    dense = X.toarray()
    expected = np.column_stack([zero_diag_column_solve(dense, np.full(25, lam), j)
                                for j in range(25)])
    assert isinstance(model.W_, np.ndarray) and model.W_.dtype == np.float64
    np.testing.assert_allclose(model.W_, expected, rtol=0, atol=TOL)
    assert np.all(np.diag(model.W_) == 0.0)
    np.testing.assert_allclose(model.score(X[:5]), dense[:5] @ expected, rtol=0, atol=1e-9)


def test_dlae_and_edlae_on_the_device(X, target):
    p, lam = 0.3, 2.0
    dense = X.toarray()
    G = dense.T @ dense
    penalty = p / (1 - p) * np.diag(G) + lam
    design = np.vstack([dense, np.diag(np.sqrt(penalty))])
    dlae = np.linalg.lstsq(design, np.vstack([dense, np.zeros_like(G)]), rcond=None)[0]
    np.testing.assert_allclose(DLAE(p=p, lam=lam, dtype="float64", device=target).fit(X).W_,
                               dlae, rtol=0, atol=TOL)
    edlae = np.column_stack([zero_diag_column_solve(dense, penalty, j) for j in range(25)])
    np.testing.assert_allclose(EDLAE(p=p, lam=lam, dtype="float64", device=target).fit(X).W_,
                               edlae, rtol=0, atol=TOL)


def test_debiased_ease_on_the_device_solves_its_kkt_conditions(X, target):
    lam, alpha = 4.0, 0.6
    dense = X.toarray()
    G = dense.T @ dense
    expected = np.zeros((25, 25))
    for j in range(25):
        others = np.delete(np.arange(25), j)
        system = (1 - alpha) * G[np.ix_(others, others)] + lam * np.eye(24)
        expected[others, j] = np.linalg.solve(system, G[others, j])
    got = DebiasedEASE(lam=lam, alpha=alpha, dtype="float64", device=target).fit(X).W_
    np.testing.assert_allclose(got, expected, rtol=0, atol=TOL)


@pytest.mark.parametrize("make", [lambda d: EASE(lam=3.0, device=d),
                                  lambda d: EDLAE(p=0.25, lam=1.0, device=d)])
def test_float32_on_the_device_agrees_with_the_cpu_fit(X, target, make):
    on_device, on_cpu = make(target).fit(X).W_, make("cpu").fit(X).W_
    assert on_device.dtype == on_cpu.dtype == np.float32
    np.testing.assert_allclose(on_device, on_cpu, rtol=0, atol=1e-5 * np.abs(on_cpu).max())


def _eig_filter(dense: np.ndarray, f) -> np.ndarray:
    """V_k diag(f(e)) V_kᵀ from numpy's full eigendecomposition of XᵀX, k = len(f(e))."""
    values, vectors = np.linalg.eigh(dense.T @ dense)
    values, vectors = values[::-1], vectors[:, ::-1]
    weights = f(values)
    k = len(weights)
    return (vectors[:, :k] * weights) @ vectors[:, :k].T


@pytest.mark.parametrize("shape", [(120, 25), (15, 40)], ids=["item side", "user side"])
def test_spectral_filters_on_the_device(target, shape):
    """LRR (eq. 70), PureSVD and the closed-form MF (eq. 74) on the device, from the item-side
    Gram matrix or the smaller user-side one, against numpy's eigendecomposition."""
    X = binary_matrix(*shape, 0.3, seed=1)
    dense = X.toarray()
    k, lam = 8, 3.0
    cases = [
        (LRR(rank=k, lam=lam, device=target), lambda e: e[:k] / (e[:k] + lam)),
        (PureSVD(rank=k, device=target), lambda e: np.ones(k)),
        (ClosedFormMF(rank=k, lam=1.5, device=target),
         lambda e: np.clip(1 - 1.5 / np.sqrt(np.maximum(e[:k], 0)), 0, None)),
    ]
    for model, f in cases:
        clear_spectrum_cache()
        got = model.fit(X).weights()
        np.testing.assert_allclose(got, _eig_filter(dense, f), rtol=0, atol=1e-9,
                                   err_msg=type(model).__name__)


def test_device_spectra_are_cached_apart_from_the_cpu(target):
    X = binary_matrix(60, 20, 0.3, seed=2)
    clear_spectrum_cache()
    on_cpu = spectral_module.compute_spectrum(X, rank=5)
    on_device = spectral_module.compute_spectrum(X, rank=5, device=target)
    assert on_device is not on_cpu
    assert spectral_module.compute_spectrum(X, rank=5, device=target) is on_device
    np.testing.assert_allclose(on_device.eigenvalues[:5], on_cpu.eigenvalues[:5], rtol=1e-12)


def test_a_singular_system_on_the_device_says_what_to_change(target):
    X = sp.csr_matrix(np.array([[1.0, 0.0, 0.0], [1.0, 0.0, 1.0]]))  # item 1 never seen
    with pytest.raises(NotPositiveDefiniteError, match="increase the regularization"):
        EASE(lam=0.0, dtype="float64", device=target).fit(X)


@pytest.mark.parametrize("solver", ["cholesky", "cg"])
def test_ials_on_the_device_sweeps_as_the_brute_force_solves(target, solver):
    """Two epochs on the device against per-row np.linalg.solve sweeps from the seeded start
    (CG with k steps on k factors is exact up to rounding), and the fold-in scores."""
    x = random_binary(seed=3)
    k, alpha0, reg, nu = 4, 0.3, 0.05, 1.0
    model = IALS(factors=k, reg=reg, alpha0=alpha0, nu=nu, epochs=2, seed=7, init_std=0.5,
                 dtype="float64", backend="torch", device=target, solver=solver,
                 cg_steps=k, block_size=7).fit(x)
    rng = np.random.default_rng(7)
    rng.normal(0.0, 0.5 / np.sqrt(k), (x.shape[0], k))
    users = np.zeros((x.shape[0], k))  # unused: the user step comes first
    items = rng.normal(0.0, 0.5 / np.sqrt(k), (x.shape[1], k))
    ones, dense = np.ones(x.shape[0]), x.toarray()
    for _ in range(2):
        users = brute_user_factors(dense, items, alpha0, reg, nu, ones, ones)
        items = brute_item_factors(dense, users, alpha0, reg, nu, ones, ones)
    atol = 1e-10 if solver == "cholesky" else 1e-6
    np.testing.assert_allclose(model.user_factors_, users, rtol=0, atol=atol)
    np.testing.assert_allclose(model.item_factors_, items, rtol=0, atol=atol)
    folded = brute_user_factors(dense[:6], items, alpha0, reg, nu, ones[:6], ones[:6])
    np.testing.assert_allclose(model.score(x[:6], users=None), folded @ items.T, rtol=0,
                               atol=atol)


def test_debiased_ials_on_the_device_equals_its_cpu_fit(target):
    x = random_binary(seed=5)
    params = dict(factors=4, reg=0.05, alpha0=0.3, epochs=3, dtype="float64", backend="torch")
    on_device = DebiasedIALS(**params, device=target).fit(x)
    on_cpu = DebiasedIALS(**{**params, "backend": "numpy"}).fit(x)  # brute-checked in test_als
    np.testing.assert_allclose(on_device.item_factors_, on_cpu.item_factors_, rtol=0,
                               atol=1e-10)
    np.testing.assert_allclose(on_device.loss_history_, on_cpu.loss_history_, rtol=1e-12)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message where CUDA is absent")
@pytest.mark.parametrize("make", [lambda: EASE(device="cuda"), lambda: PureSVD(device="cuda:0"),
                                  lambda: DebiasedEASE(device="cuda"),
                                  lambda: IALS(backend="torch", device="cuda"),
                                  lambda: MF(device="cuda:0", epochs=1)])
def test_cuda_where_there_is_none_is_refused_before_any_work(X, make):
    with pytest.raises(ConfigError, match=r"\.device='cuda(:0)?': CUDA is not available here"):
        make().fit(X)


@pytest.mark.parametrize("make, message", [
    (lambda: EASE(device="gpu"), "ease.device='gpu' is not allowed; allowed: cpu, cuda"),
    (lambda: LRR(device="cuda:x"), "lrr.device='cuda:x' is not allowed"),
    (lambda: LowRankEDLAE(device="cuda"), "the low-rank ADMM runs on the CPU only"),
    (lambda: LRR(device="cuda", dropout=0.2), "general closed form .* runs on the CPU only"),
    (lambda: IALS(device="cuda"), "ials.device='cuda' runs through torch; add "
                                  "ials.backend=torch"),
])
def test_device_settings_that_cannot_run_are_refused(make, message):
    with pytest.raises(ConfigError, match=message):
        make()


def test_the_device_memory_guard_counts_the_devices_free_memory(monkeypatch):
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (2 * 2**30, 80 * 2**30))
    cuda = types.SimpleNamespace(type="cuda", __str__=lambda self: "cuda:0")
    linalg.check_device_memory(10_000, "float32", 3.0, "EASE", "", cuda)  # 1.1 GiB
    with pytest.raises(MemoryBudgetError) as err:
        linalg.check_device_memory(20_000, "float32", 3.0, "ease on 20000 items",
                                          "Use a low-rank model.", cuda)
    message = str(err.value)
    assert "4.5 GiB" in message and "2.0 GiB of the device is free" in message
    assert "3 dense 20000x20000 float32" in message and message.endswith("low-rank model.")


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_a_device_fit_guards_the_host_for_one_matrix_and_the_device_for_three(
        X, target, monkeypatch, dtype):
    """On a device the host holds one n x n array at a time (G, then W), the device three: with
    the host's memory (and a CUDA device's) at exactly one matrix of the model's dtype, the host
    check passes and the device's fails, naming the model, the matrices and the alternative."""
    one = 25 * 25 * np.dtype(dtype).itemsize
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (one, 80 * 2**30))
    monkeypatch.setattr(linalg, "available_memory_bytes", lambda: one)
    with pytest.raises(MemoryBudgetError) as err:
        sized_advice_ease(dtype=dtype, device=target).fit(X)
    alternative = "Try model=lrr with rank <= 5."
    hint = " dtype=float32 would need 0.0 GiB." if dtype == "float64" else ""
    if ease_module.torch_device(target, "ease.device").type == "cuda":
        assert str(err.value) == (
            f"ease on 25 items on cuda: needs about 0.0 GiB (3 dense 25x25 {dtype} matrices) "
            f"but only 0.0 GiB of the device is free. {alternative}")
    else:  # CPU tensors: the device is the host
        assert str(err.value) == (
            f"ease on 25 items: needs about 0.0 GiB (3 dense 25x25 {dtype} matrices) but only "
            f"0.0 GiB is available. {alternative}{hint}")
    monkeypatch.setattr(linalg, "available_memory_bytes", lambda: one - 1)
    with pytest.raises(MemoryBudgetError) as err:
        sized_advice_ease(dtype=dtype, device=target).fit(X)
    assert str(err.value) == (
        f"ease on 25 items: needs about 0.0 GiB (1 dense 25x25 {dtype} matrices) but only "
        f"0.0 GiB is available. {alternative}{hint}")
