"""The optimizers of linrec's torch trainers (MF; Adam also for the nearby models) and MF's
gradient clipping.

`adam`: torch's fused Adam kernel (`FusedAdam`); `sparse_adam`: torch's lazy SparseAdam with the
rows updated in place (`RowAdam`); `clip_coefficient`: torch's clip_grad_norm_ coefficient of the
gradient with the `full_table` L2 term that Adam adds itself; `NoClipBound`: a cheap upper bound
of that norm which tells when the exact one is not needed.

Both optimizers are `TableOptimizer`s, not `torch.optim.Optimizer`s: the first use of any torch
optimizer imports `torch._dynamo` (its `__init__`, `step` and `zero_grad` are wrapped to disable
the compiler), which takes as long as importing torch itself (4.5 s on a 2-core AMD EPYC VM),
and every MF or nearby-model run would pay it. Their updates, state and `state_dict` are
torch's, bit for bit (tests/models/test_mf_optim.py), so checkpoints move between the two.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

import torch

from linrec.models.mf_ops import square_sum, squared_norm_with_l2


def clip_coefficient(tables, max_norm: float, reg: float) -> float:
    """torch.nn.utils.clip_grad_norm_'s coefficient, max/(norm + 1e-6) capped at 1, of the
    gradient with the `full_table` L2 term: norm = ‖(g_U + reg·U, g_I + reg·I)‖ (the L2 term
    is added by Adam's weight_decay, so it is not written here: one read of each table). A
    Python float: on a GPU, one synchronisation per step."""
    total = sum(squared_norm_with_l2(t.grad, t, reg) for t in tables)
    return min(1.0, max_norm / (math.sqrt(total) + 1e-6))


class NoClipBound:
    """Tells, from a cheap upper bound, that a step is not clipped, so that the exact norm (with
    dense gradients a float64 read of both tables and their gradients) is needed only when it
    might be: clipping acts early in training, and most later steps are far below the
    threshold. When the bound is below `max_norm` the exact coefficient is 1.0 as well: the
    numbers do not change.

    ‖(g_U + reg·U, g_I + reg·I)‖² ≤ Σ_t (‖g_t‖ + reg·B_t)², with
    - ‖g_U‖ over the batch's users, the only rows the user table's gradient has (the table is
      read only through `MF._rows` of the batch's users), and ‖g_I‖ over the item table, both
      summed in float32 and padded by `_PAD` for its rounding;
    - B_t ≥ ‖W_t‖: the exact norm at `reset` (the epoch's start: no parameters are loaded
      within an epoch) plus, per Adam step, √numel · max |Δw|, where |Δw| = lr·|m̂|/(√v̂ + ε)
      ≤ lr·C_t, C_t = √(1 − β2ᵗ)/(1 − β1ᵗ) · (1 − β1)/√((1 − β2)(1 − β1²/β2)) (Cauchy–Schwarz
      on the sums that make m and v; β1² < β2, else there is no bound and every step takes the
      exact norm). Clipping and weight decay change g, not this bound.

    Sparse gradients (`sparse_adam`: coalesced, no L2 term in the norm) need no weight bound:
    their squares are summed in float64 in one read (`square_sum`), within (k·d)·2⁻⁵² of the
    exact sum, and that relative error, padded, stands in for `_PAD`."""

    _PAD = 1e-3

    def __init__(self) -> None:
        self.weight_norms: list[float] | None = None
        self.steps = 0  # Adam's t

    def reset(self, tables, steps: int) -> None:
        """The exact norms of the tables, after `steps` Adam updates."""
        with torch.no_grad():
            self.weight_norms = [float(torch.linalg.vector_norm(t, dtype=torch.float64))
                                 for t in tables]
        self.steps = steps

    def advance(self, tables, group: dict[str, Any]) -> None:
        """After one more Adam update with the settings of `group`."""
        if self.weight_norms is None:
            return
        self.steps += 1
        beta1, beta2 = group["betas"]
        if beta1 * beta1 >= beta2:
            self.weight_norms = None
            return
        ratio = (math.sqrt(1 - beta2 ** self.steps) / (1 - beta1 ** self.steps) * (1 - beta1)
                 / math.sqrt((1 - beta2) * (1 - beta1 * beta1 / beta2)))
        self.weight_norms = [
            (norm + math.sqrt(t.numel()) * group["lr"] * ratio * (1 + self._PAD))
            * (1 + self._PAD) for norm, t in zip(self.weight_norms, tables, strict=True)]

    def unclipped(self, tables, users, max_norm: float, reg: float) -> bool:
        """True when the step's gradient norm (with the L2 term reg·W) is surely below
        `max_norm`; False when it may not be (then compute it exactly)."""
        user_grad, item_grad = (t.grad for t in tables)
        if user_grad.is_sparse and item_grad.is_sparse and reg == 0:
            return self._sparse_unclipped((user_grad, item_grad), max_norm)
        if self.weight_norms is None:
            return False
        grad_norms = torch.stack((torch.linalg.vector_norm(user_grad[torch.unique(users)]),
                                  torch.linalg.vector_norm(item_grad))).tolist()  # one sync
        bound = math.hypot(*(g * (1 + self._PAD) + reg * w
                             for g, w in zip(grad_norms, self.weight_norms, strict=True)))
        return bound * (1 + self._PAD) + 1e-6 < max_norm  # NaN or inf: False

    @staticmethod
    def _sparse_unclipped(grads, max_norm: float) -> bool:
        """True when the coalesced sparse gradients' norm is surely below `max_norm`. The sum
        here and torch's (the exact path: float64 norms, squared, added, rooted) are each
        within γ = (k·d + 1)·2⁻⁵³ of the true sum, and torch adds four roundings: the norm is
        below √total·(1 + 2γ + 8·2⁻⁵³), which the pad covers with room."""
        values = [grad.coalesce().values() for grad in grads]
        count = sum(v.numel() for v in values)
        total = sum(square_sum(v) for v in values)
        pad = 1.0 + 4.0 * (count + 16) * 2.0 ** -52
        return math.sqrt(total) * pad + 1e-6 < max_norm * (1 - 2.0 ** -48)  # NaN: False


class TableOptimizer:
    """What linrec's trainers use of `torch.optim.Optimizer`, without its import of
    `torch._dynamo`: one parameter group (`param_groups[0]`: the parameters and the settings,
    `lr` among them, which the schedule sets), the per-parameter `state`, `zero_grad`, and
    `state_dict` / `load_state_dict` in torch's format (state by parameter index, the groups'
    settings with the parameters' indices)."""

    def __init__(self, params: Iterable[torch.Tensor], defaults: Mapping[str, Any]) -> None:
        self.defaults = dict(defaults)
        self.param_groups = [{**self.defaults, "params": list(params)}]
        self.state: defaultdict[torch.Tensor, dict[str, Any]] = defaultdict(dict)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for param in self.param_groups[0]["params"]:
            if param.grad is None:
                continue
            if set_to_none:
                param.grad = None
            else:
                param.grad.detach_().zero_()

    def state_dict(self) -> dict[str, Any]:
        """torch's layout; the tensors are the optimizer's own, not copies (as torch's)."""
        params = self.param_groups[0]["params"]
        index = {id(p): i for i, p in enumerate(params)}
        group = {k: v for k, v in self.param_groups[0].items() if k != "params"}
        group["params"] = list(range(len(params)))
        return {"state": {index[id(p)]: state for p, state in self.state.items()},
                "param_groups": [group]}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """A state written by `state_dict` or by the torch optimizer of the same update: the
        moments cast to each parameter's dtype and device, as torch casts them."""
        groups = state_dict["param_groups"]
        params = self.param_groups[0]["params"]
        if len(groups) != 1 or len(groups[0]["params"]) != len(params):
            raise ValueError("the optimizer state holds another set of parameters "
                             f"({[len(g['params']) for g in groups]} in its groups, "
                             f"{len(params)} here)")
        self.state = defaultdict(dict)
        for i, state in state_dict["state"].items():
            param = params[groups[0]["params"].index(i)]
            self.state[param] = {key: self._cast_state(key, value, param)
                                 for key, value in state.items()}
        self.param_groups = [{**{k: v for k, v in groups[0].items() if k != "params"},
                              "params": params}]

    def _cast_state(self, key: str, value: Any, param: torch.Tensor) -> Any:
        if key == "step" or not isinstance(value, torch.Tensor):
            return value
        if param.is_floating_point():
            return value.to(dtype=param.dtype, device=param.device)
        return value.to(device=param.device)


class FusedAdam(TableOptimizer):
    """torch's `Adam(fused=True)`: the same kernel (`torch._fused_adam_`), state (a float32
    `step` tensor on the parameter's device, `exp_avg`, `exp_avg_sq`) and settings, for
    parameters with dense gradients on one device (CPU or CUDA) in one dtype. `weight_decay`
    adds weight_decay·W to the gradient inside the kernel."""

    DEVICES = ("cpu", "cuda")

    def __init__(self, params: Iterable[torch.Tensor], lr: float, weight_decay: float = 0.0,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> None:
        super().__init__(params, {
            "lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay,
            "amsgrad": False, "maximize": False, "foreach": None, "capturable": False,
            "differentiable": False, "fused": True, "decoupled_weight_decay": False})
        kinds = {(p.device, p.dtype) for p in self.param_groups[0]["params"]}
        if len(kinds) != 1 or next(iter(kinds))[0].type not in self.DEVICES \
                or not next(iter(kinds))[1].is_floating_point:
            raise ValueError(f"FusedAdam takes floating-point parameters on one CPU or CUDA "
                             f"device in one dtype, not {sorted(map(str, kinds))}")

    def _cast_state(self, key: str, value: Any, param: torch.Tensor) -> Any:
        if key == "step":  # torch keeps a fused optimizer's step in float32 on the device
            return torch.as_tensor(value).to(dtype=torch.float32, device=param.device)
        return super()._cast_state(key, value, param)

    @torch.no_grad()
    def step(self) -> None:
        group = self.param_groups[0]
        params = [p for p in group["params"] if p.grad is not None]
        if not params:
            return
        for param in params:
            if param.grad.is_sparse:
                raise RuntimeError("Adam does not take sparse gradients: "
                                   "use model.optimizer=sparse_adam")
            state = self.state[param]
            if not state:
                state["step"] = torch.zeros((), dtype=torch.float32, device=param.device)
                state["exp_avg"] = torch.zeros_like(param, memory_format=torch.preserve_format)
                state["exp_avg_sq"] = torch.zeros_like(param,
                                                       memory_format=torch.preserve_format)
        states = [self.state[p] for p in params]
        steps = [s["step"] for s in states]
        torch._foreach_add_(steps, 1)
        beta1, beta2 = group["betas"]
        torch._fused_adam_(params, [p.grad for p in params], [s["exp_avg"] for s in states],
                           [s["exp_avg_sq"] for s in states], [], steps, amsgrad=False,
                           lr=group["lr"], beta1=beta1, beta2=beta2,
                           weight_decay=group["weight_decay"], eps=group["eps"],
                           maximize=False, grad_scale=None, found_inf=None)


def adam(parameters, lr: float, weight_decay: float):
    """Adam with torch's fused kernel; `weight_decay` adds weight_decay·W to the gradient
    inside it: the `full_table` L2 term, bitwise the same as adding it to the gradient first.
    On a device `FusedAdam` does not cover, torch's Adam (fused where it has the kernel)."""
    parameters = list(parameters)
    if all(p.device.type in FusedAdam.DEVICES for p in parameters):
        return FusedAdam(parameters, lr=lr, weight_decay=weight_decay)
    try:
        return torch.optim.Adam(parameters, lr=lr, weight_decay=weight_decay, fused=True)
    except (RuntimeError, TypeError, ValueError):
        return torch.optim.Adam(parameters, lr=lr, weight_decay=weight_decay)


def sparse_adam(parameters, lr: float):
    """torch's SparseAdam (lazy Adam: only the rows in a step's sparse gradient have their
    moments and values updated; its bias corrections count every step), bitwise the same
    update, with the rows updated in place (compiled row passes on a CPU, indexed torch ops
    elsewhere) instead of torch's sparse-tensor arithmetic (several sparse ops and coalesces
    per table and step)."""
    return RowAdam(parameters, lr=lr)


class RowAdam(TableOptimizer):
    """torch's SparseAdam update, row by row in place (see `sparse_adam`); its state (an int
    `step`, `exp_avg`, `exp_avg_sq`) and settings are SparseAdam's."""

    def __init__(self, params: Iterable[torch.Tensor], lr: float,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> None:
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "maximize": False})

    @torch.no_grad()
    def step(self, closure=None):
        if closure is not None:
            raise ValueError("mf's sparse Adam takes no closure")
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for param in group["params"]:
                if param.grad is None:
                    continue
                if not param.grad.is_sparse:
                    raise RuntimeError("sparse_adam got a dense gradient")
                state = self.state[param]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(param)
                    state["exp_avg_sq"] = torch.zeros_like(param)
                state["step"] += 1
                grad = param.grad.coalesce()  # the update is not linear: unique rows
                rows, values = grad.indices()[0], grad.values()
                if values.numel() == 0:
                    continue
                step = state["step"]
                step_size = group["lr"] * math.sqrt(1 - beta2 ** step) / (1 - beta1 ** step)
                if param.device.type == "cpu":  # two passes over the rows, same ops
                    from linrec.models import _mf_kernels

                    grads = values.contiguous().numpy()
                    # the scalars in the table's precision, as torch casts them
                    keep1, keep2, scale, eps = (grads.dtype.type(c) for c in (
                        1 - beta1, 1 - beta2, -step_size, group["eps"]))
                    mean, square = torch.empty_like(values), torch.empty_like(values)
                    _mf_kernels.row_adam_moments(
                        rows.numpy(), grads,
                        state["exp_avg"].numpy(), state["exp_avg_sq"].numpy(), keep1,
                        keep2, mean.numpy(), square.numpy())
                    _mf_kernels.row_adam_update(rows.numpy(), mean.numpy(),
                                                square.sqrt_().numpy(),
                                                param.detach().numpy(), scale, eps)
                    continue
                # torch's order of operations: m += (g - m)(1 - β1), v += (g² - v)(1 - β2)
                old = state["exp_avg"].index_select(0, rows)
                mean = values.sub(old).mul_(1 - beta1).add_(old)
                old = state["exp_avg_sq"].index_select(0, rows)
                square = values.pow(2).sub_(old).mul_(1 - beta2).add_(old)
                state["exp_avg"].index_copy_(0, rows, mean)
                state["exp_avg_sq"].index_copy_(0, rows, square)
                param.index_add_(0, rows, -step_size * mean.div_(square.sqrt_().add_(
                    group["eps"])))
        return None
