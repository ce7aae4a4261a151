"""The MF trainer's custom autograd ops (linrec.models.mf_ops) against the plain torch
formulas in float64: values, gradients (finite differences), both forward paths of
sampled_dot, the gradient-free pair_scores, and results that do not depend on thread timing;
on the CPU and on a CUDA device where there is one."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from linrec.models.mf_ops import normalize_rows, pair_scores, sampled_dot, squared_norm_with_l2


def _tensors(batch: int, n: int, n_items: int, dim: int = 5, seed: int = 0,
             device: str = "cpu"):
    """rows (batch, dim) and table (n_items, dim) in float64 requiring gradients, index
    (batch, n), drawn on the CPU and placed on `device`."""
    g = torch.Generator().manual_seed(seed)
    rows = torch.randn(batch, dim, generator=g, dtype=torch.float64)
    table = torch.randn(n_items, dim, generator=g, dtype=torch.float64)
    index = torch.randint(0, n_items, (batch, n), generator=g)
    return (rows.to(device).requires_grad_(), table.to(device).requires_grad_(),
            index.to(device))


@pytest.mark.parametrize("shape", [(7, 9, 11), (6, 30, 4), (1, 1, 1), (3, 5, 50)],
                         ids=["sparse", "dense (N > items)", "one", "few draws"])
def test_sampled_dot_equals_the_gathered_product_with_its_gradients(shape, device):
    rows, table, index = _tensors(*shape, device=device)
    weights = torch.randn(index.shape, dtype=torch.float64).to(device)
    ours = sampled_dot(rows, table, index)
    reference = (table[index] * rows[:, None, :]).sum(-1)
    torch.testing.assert_close(ours, reference, rtol=0, atol=1e-12)
    grads = torch.autograd.grad((ours * weights).sum(), (rows, table))
    expected = torch.autograd.grad((reference * weights).sum(), (rows, table))
    for got, want in zip(grads, expected, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    assert torch.autograd.gradcheck(lambda r, t: sampled_dot(r, t, index), (rows, table))


def test_sampled_dot_only_computes_the_gradients_asked_for(device):
    rows, table, index = _tensors(4, 6, 9, device=device)
    (grad,) = torch.autograd.grad(sampled_dot(rows, table.detach(), index).sum(), rows)
    torch.testing.assert_close(grad, table.detach()[index].sum(1))


def test_sampled_dot_is_bitwise_reproducible_on_two_threads():
    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        rows, table, index = _tensors(256, 200, 3000, dim=32)
        rows, table = rows.float().detach(), table.float().detach()
        weights = torch.randn(index.shape)

        def run():
            r, t = rows.clone().requires_grad_(True), table.clone().requires_grad_(True)
            s = sampled_dot(r, t, index)
            (s * weights).sum().backward()
            return s, r.grad, t.grad

        first = run()
        for _ in range(5):
            for a, b in zip(first, run(), strict=True):
                assert torch.equal(a, b)
    finally:
        torch.set_num_threads(previous)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_pair_scores_equal_the_gathered_product_on_any_thread_count(dtype, device):
    rows, table, index = _tensors(9000, 7, 40, dim=6, device=device)  # > 1 row chunk
    rows, table = rows.detach(), table.detach()
    reference = (table[index] * rows[:, None, :]).sum(-1)
    tolerance = 1e-12 if dtype == torch.float64 else 1e-5
    previous = torch.get_num_threads()
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            ours = pair_scores(rows.to(dtype), table.to(dtype), index)
            assert ours.dtype == dtype and not ours.requires_grad
            torch.testing.assert_close(ours.double(), reference, rtol=0, atol=tolerance)
    finally:
        torch.set_num_threads(previous)


def test_normalize_rows_equals_f_normalize_with_its_gradient(device):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(8, 6, generator=g, dtype=torch.float64)
    x[3] *= 1e-14  # below EPS: only scaled, as F.normalize does
    x[5] = 0.0
    x = x.to(device).requires_grad_(True)
    weights = torch.randn(8, 6, generator=g, dtype=torch.float64).to(device)
    ours, reference = normalize_rows(x), F.normalize(x, dim=-1)
    torch.testing.assert_close(ours, reference, rtol=1e-15, atol=0)
    got = torch.autograd.grad((ours * weights).sum(), x)[0]
    want = torch.autograd.grad((reference * weights).sum(), x)[0]
    torch.testing.assert_close(got, want, rtol=1e-12, atol=0)
    y = torch.randn(5, 4, generator=g, dtype=torch.float64).to(device).requires_grad_(True)
    assert torch.autograd.gradcheck(normalize_rows, (y,))


def test_the_clipping_norm_is_the_float64_norm_of_the_l2_gradient(device):
    """‖grad + reg·weights‖² of a table, against numpy's float64 sum, with the weights requiring
    gradients (as the trainer's tables do)."""
    g = torch.Generator().manual_seed(4)
    weights = torch.randn(300, 16, generator=g).to(device).requires_grad_(True)
    grad = torch.randn(300, 16, generator=g).to(device)
    got = squared_norm_with_l2(grad, weights, 0.3)
    want = ((grad.cpu().double().numpy() + 0.3 * weights.detach().cpu().double().numpy()) ** 2)
    assert got == pytest.approx(want.sum(), rel=1e-12)


def test_the_compiled_row_passes_do_not_depend_on_the_thread_count():
    """normalize_rows' backward and the clipping norm run on row chunks, one per thread: the
    numbers are the same on 1 and 2 threads, and agree with the torch formulas."""
    g = torch.Generator().manual_seed(2)
    x = torch.randn(20000, 16, generator=g, requires_grad=True)  # > 2 chunks of 8192 rows
    weights = torch.randn(20000, 16, generator=g)
    previous, results = torch.get_num_threads(), []
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            (grad,) = torch.autograd.grad((normalize_rows(x) * weights).sum(), x)
            results.append((grad, squared_norm_with_l2(weights, x, 0.3)))
    finally:
        torch.set_num_threads(previous)
    assert torch.equal(results[0][0], results[1][0]) and results[0][1] == results[1][1]
    (want,) = torch.autograd.grad((F.normalize(x, dim=-1) * weights).sum(), x)
    torch.testing.assert_close(results[0][0], want, rtol=1e-5, atol=1e-7)
    expected = float(((weights.double() + 0.3 * x.detach().double()) ** 2).sum())
    assert results[0][1] == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_square_sum_is_the_float64_sum_of_squares_within_its_error_bound(dtype, device):
    """square_sum (any summation order) agrees with an exactly rounded float64 sum of squares
    (math.fsum) within the (k·d)·2⁻⁵² relative bound the clipping check pads for, on a
    non-contiguous view too; an empty tensor sums to 0."""
    import math

    from linrec.models.mf_ops import square_sum

    generator = torch.Generator().manual_seed(3)
    values = (torch.randn((301, 64), generator=generator, dtype=dtype) * 1e3).to(device)
    values.requires_grad_(True)  # as the trainer's tables
    for tensor in (values, values[::2, 1:40], values[:0]):
        exact = math.fsum(float(v) ** 2 for v in tensor.detach().reshape(-1).cpu().double())
        got = square_sum(tensor)
        assert abs(got - exact) <= tensor.numel() * 2.0 ** -52 * exact, (got, exact)
