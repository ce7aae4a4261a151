"""linrec's optimizers against torch's own (the reference): `FusedAdam` is
`torch.optim.Adam(fused=True)` and `RowAdam` is `torch.optim.SparseAdam`, bit for bit, through
rate and weight-decay changes, and their checkpoints load into each other; and MF and nearby
fits in a fresh process never import `torch._dynamo` (which any torch optimizer imports on
first use)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from linrec.models import mf_optim


def _tables(dtype: torch.dtype) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randn(n, 8, generator=g, dtype=dtype).requires_grad_(True) for n in (40, 25)]


def _gradients(tables, step: int) -> None:
    """Gradients that differ by step; the item table gets none every third step (a
    parameter without a gradient is skipped and its step count does not move)."""
    g = torch.Generator().manual_seed(100 + step)
    for i, table in enumerate(tables):
        table.grad = None if i == 1 and step % 3 == 2 else \
            torch.randn(table.shape, generator=g, dtype=table.dtype) * 10.0 ** (step % 4 - 2)


def _run(optimizer, tables, steps: range) -> None:
    for step in steps:
        optimizer.zero_grad(set_to_none=True)
        _gradients(tables, step)
        if step == 4:  # the schedule cuts the rate; clipping scales the L2 term
            optimizer.param_groups[0]["lr"] = 0.01
        optimizer.param_groups[0]["weight_decay"] = 0.1 if step % 2 else 0.05
        optimizer.step()


def _assert_same(ours, theirs, ours_tables, theirs_tables) -> None:
    for a, b in zip(ours_tables, theirs_tables, strict=True):
        assert torch.equal(a.detach(), b.detach())
    mine, reference = ours.state_dict(), theirs.state_dict()
    assert mine["param_groups"] == reference["param_groups"]
    assert mine["state"].keys() == reference["state"].keys()
    for index, state in reference["state"].items():
        assert mine["state"][index].keys() == state.keys()
        for key, value in state.items():
            assert value.dtype == mine["state"][index][key].dtype, key
            assert torch.equal(mine["state"][index][key], value), key


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
def test_fused_adam_is_torchs_fused_adam_bitwise(dtype):
    ours_tables, theirs_tables = _tables(dtype), _tables(dtype)
    ours = mf_optim.adam(ours_tables, lr=0.1, weight_decay=0.1)
    theirs = torch.optim.Adam(theirs_tables, lr=0.1, weight_decay=0.1, fused=True)
    assert isinstance(ours, mf_optim.FusedAdam)
    _run(ours, ours_tables, range(9))
    _run(theirs, theirs_tables, range(9))
    _assert_same(ours, theirs, ours_tables, theirs_tables)


@pytest.mark.parametrize("direction", ["torch to ours", "ours to torch", "an int step to ours"])
def test_a_checkpoint_moves_between_fused_adam_and_torchs(direction):
    """Five steps with one optimizer, its state_dict (through torch.save / torch.load, as a
    checkpoint) loaded into the other on fresh tables holding the same weights, four more
    steps: the same as nine steps with torch's Adam throughout. A step count stored as a
    Python int (torch's older checkpoints) becomes the fused kernel's float32 tensor."""
    import io

    reference_tables = _tables(torch.float32)
    reference = torch.optim.Adam(reference_tables, lr=0.1, weight_decay=0.1, fused=True)
    _run(reference, reference_tables, range(9))

    make_ours = lambda t: mf_optim.FusedAdam(t, lr=0.1, weight_decay=0.1)  # noqa: E731
    make_theirs = lambda t: torch.optim.Adam(t, lr=0.1, weight_decay=0.1, fused=True)  # noqa: E731
    first, second = (make_ours, make_theirs) if direction == "ours to torch" else \
        (make_theirs, make_ours)
    tables = _tables(torch.float32)
    before = first(tables)
    _run(before, tables, range(5))
    saved = before.state_dict()
    if direction == "an int step to ours":
        saved = {**saved, "state": {i: {**state, "step": int(state["step"])}
                                    for i, state in saved["state"].items()}}
    buffer = io.BytesIO()
    torch.save(saved, buffer)
    buffer.seek(0)
    resumed = [t.detach().clone().requires_grad_(True) for t in tables]
    after = second(resumed)
    after.load_state_dict(torch.load(buffer))
    _run(after, resumed, range(5, 9))
    _assert_same(after, reference, resumed, reference_tables)


def test_row_adam_state_is_sparse_adams_and_loads_into_it():
    """Three lazy steps with `RowAdam`, its state_dict loaded into torch's SparseAdam (and the
    other way round), three more: the same tables and state as six steps of SparseAdam."""
    def steps(optimizer, table, seeds):
        for seed in seeds:
            table.grad = None
            ids = torch.randint(30, (20,), generator=torch.Generator().manual_seed(seed))
            (F.embedding(ids, table, sparse=True) ** 2).sum().backward()
            optimizer.step()

    start = torch.randn(30, 4, generator=torch.Generator().manual_seed(0))
    reference_table = start.clone().requires_grad_(True)
    reference = torch.optim.SparseAdam([reference_table], lr=1e-2)
    steps(reference, reference_table, range(6))
    for first, second in ((mf_optim.sparse_adam, torch.optim.SparseAdam),
                          (torch.optim.SparseAdam, mf_optim.sparse_adam)):
        table = start.clone().requires_grad_(True)
        before = first([table], lr=1e-2)
        steps(before, table, range(3))
        after = second([table], lr=1e-2)
        after.load_state_dict(before.state_dict())
        steps(after, table, range(3, 6))
        assert torch.equal(table.detach(), reference_table.detach())
        assert after.state_dict()["param_groups"] == reference.state_dict()["param_groups"]
        state, expected = after.state_dict()["state"][0], reference.state_dict()["state"][0]
        assert state["step"] == expected["step"] == 6
        for key in ("exp_avg", "exp_avg_sq"):
            assert torch.equal(state[key], expected[key])


def test_fused_adam_refuses_what_its_kernel_does_not_take():
    with pytest.raises(ValueError, match="one CPU or CUDA device in one dtype"):
        mf_optim.FusedAdam([torch.zeros(3, requires_grad=True),
                            torch.zeros(3, dtype=torch.float64, requires_grad=True)], lr=0.1)
    table = torch.zeros(5, 2, requires_grad=True)
    optimizer = mf_optim.FusedAdam([table], lr=0.1)
    F.embedding(torch.tensor([1, 2]), table, sparse=True).sum().backward()
    with pytest.raises(RuntimeError, match="model.optimizer=sparse_adam"):
        optimizer.step()
    with pytest.raises(ValueError, match="another set of parameters"):
        optimizer.load_state_dict(torch.optim.Adam([table, table.detach().clone()],
                                                   lr=0.1).state_dict())


def test_an_mf_fit_in_a_fresh_process_never_imports_torch_dynamo():
    """Both optimizers, each fit written to a checkpoint and resumed from it, and a nearby
    model's fit: `torch._dynamo` stays out of the process (its import takes as long as
    torch's)."""
    script = """
import sys, tempfile
import numpy as np, scipy.sparse as sp
from linrec.models.mf import MF
from linrec.models.nearby import LearnedLambda
rng = np.random.default_rng(0)
train = sp.random(60, 30, density=0.2, format="csr", random_state=rng)
train.data[:] = 1.0
with tempfile.TemporaryDirectory() as d:
    for extra in ({}, {"optimizer": "sparse_adam", "reg_mode": "batch_rows",
                       "sampling": {"negatives": "shared", "n_negatives": 5}}):
        for _ in range(2):  # the second fit resumes from the first's checkpoint
            model = MF(dim=4, epochs=2, batch_size=16, checkpoint_dir=d + "/" + str(len(extra)),
                       **extra).fit(train)
        print("resumed from", model.resumed_from_)
    LearnedLambda(rank=5, lam=5.0, c=2.0, dtype="float64", batch_size=16, n_pairs=4, epochs=2,
                  checkpoint_dir=d + "/nearby").fit(train)
print(sorted(m for m in sys.modules if m.startswith("torch._dynamo")))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert lines[:2] == ["resumed from 2", "resumed from 2"], done.stdout
    assert lines[-1] == "[]", done.stdout
