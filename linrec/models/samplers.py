"""Samplers and priors of the MF trainer (Li 2023, §4.2; §4.4.1): the (user, positive) examples
of an epoch, the items drawn for each, the extra positives of the debiased losses and the
positive-class prior τ⁺_u.

Examples: every training pair once an epoch in a fresh order (`pairs`, SimpleX), or a user drawn
uniformly and then one of their items, as many times as there are pairs (`users`, the sampling
of LightGCN's and FreeRec's BPR code: light users weigh as much as heavy ones).

Negatives: uniform over all items (the default; may hit the user's own positives, as the
debiasing derivation and SimpleX assume), uniform over the user's unlabelled items, or ∝
popularity^β. `per_example`: N items for every (user, positive) pair (the published protocol);
`shared`: N items for the whole batch, scored by one (B × d)·(d × N) product instead of a B·N
gather: a different sampling scheme (every row sees the same negatives), an order of magnitude
faster. Positives (debiased losses): M items uniform from the user's training items, with
replacement (the anchor may be among them). All draws are vectorised torch on the training
device from one `torch.Generator` seeded by the run seed; a new draw every step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from linrec.errors import ConfigError
from linrec.models.positive_prior import PositivePriorConfig
from linrec.params import param

if TYPE_CHECKING:
    import scipy.sparse as sp
    import torch

POOLS = ("all", "unlabeled", "popularity")
MODES = ("per_example", "shared")
EXAMPLES = ("pairs", "users")
#: rows redrawn at most this many rounds for pool "unlabeled" before giving up (a user with
#: almost every item is reported, not looped on)
_MAX_REDRAWS = 100


@dataclass
class SamplingConfig(PositivePriorConfig):
    """model.sampling: negatives, positives and the τ⁺ prior of the debiased losses (the
    prior's fields: `PositivePriorConfig`)."""

    where = "model.sampling"

    negatives: str = param("per_example", choices=MODES,
                           doc="per_example (published) | shared (one set per batch, faster)")
    n_negatives: int = param(800, ge=1, doc="N; 800 in the dissertation and SimpleX")
    pool: str = param("all", choices=POOLS, doc="all | unlabeled | popularity")
    popularity_beta: float = param(1.0, ge=0, doc="q_j ∝ popularity_j^β (pool popularity)")
    n_positives: int = param(20, ge=1, doc="M for the debiased losses; 10 / 20 / 50 (Table 20)")
    examples: str = param("pairs", choices=EXAMPLES,
                          doc="pairs: every training (user, item) pair once an epoch, shuffled "
                              "(SimpleX); users: each example a user drawn uniformly, then one "
                              "of their items (LightGCN's and FreeRec's BPR); an epoch has as "
                              "many examples either way")

    def check(self) -> None:
        if self.negatives == "shared" and self.pool == "unlabeled":
            raise ConfigError("model.sampling.pool=unlabeled needs per-example negatives (each "
                              "row excludes its own user's items); use negatives=per_example")


class TrainingSampler:
    """Draws for one training matrix (users x items CSR, binary) on `device`.

    `negatives(users)` -> (items, log q): int64 (B, N) (per_example) or (N,) (shared), and the log
    sampling probability of each drawn item (same shape); `positives(users)` -> int64 (B, M);
    `tau_plus(users)` -> float (B,)."""

    def __init__(self, config: SamplingConfig, train: sp.csr_matrix, device: str,
                 generator: torch.Generator) -> None:
        import torch

        self.config, self.device, self.generator = config, device, generator
        self.n_items = train.shape[1]
        counts = np.diff(train.indptr)
        rows = np.repeat(np.arange(train.shape[0], dtype=np.int64), counts)
        #: the training pairs in CSR order, pair k = (pair_users[k], pair_items[k]): int64
        self.pair_users = torch.as_tensor(rows, device=device)
        self.pair_items = torch.as_tensor(train.indices.astype(np.int64), device=device)
        self._indptr = torch.as_tensor(train.indptr, dtype=torch.int64, device=device)
        self._counts = torch.as_tensor(counts, dtype=torch.int64, device=device)
        if config.pool == "popularity":
            popularity = np.asarray((train != 0).sum(axis=0), dtype=np.float64).ravel()
            weights = np.maximum(popularity, 0.0) ** config.popularity_beta
            if weights.sum() <= 0:
                raise ConfigError("model.sampling.pool=popularity: no item has a training "
                                  "interaction")
            probs = np.maximum(weights / weights.sum(), 1e-12)  # q_j > 0 (Li 2023, eq. 78)
            self._probs = torch.as_tensor(probs / probs.sum(), dtype=torch.float64,
                                          device=device)
            self._logq = torch.log(self._probs).to(torch.float32)
        if config.pool == "unlabeled":
            full = counts >= self.n_items
            if full.any():
                raise ConfigError(f"model.sampling.pool=unlabeled: user {int(np.argmax(full))} "
                                  "has interacted with every item; nothing is left to draw")
            # the user's items as sorted keys user * n_items + item, to test membership
            keys = np.sort(rows * self.n_items + train.indices.astype(np.int64))
            self._keys = torch.as_tensor(keys, device=device)

    # -- the (user, positive) examples of an epoch --------------------------------------------

    def epoch_examples(self) -> torch.Tensor:
        """An epoch's training examples as ids of the training pairs (CSR order: pair k is
        (row of k, indices[k])), int64 (n_pairs,): a fresh permutation of every pair
        (`examples=pairs`), or as many draws of a user uniform over the users with a training
        item, then one of that user's items uniformly (`examples=users`)."""
        import torch

        n_pairs = len(self.pair_items)
        if self.config.examples == "pairs":
            return torch.randperm(n_pairs, generator=self.generator, device=self.device)
        active = torch.nonzero(self._counts > 0).flatten()
        users = active[torch.randint(len(active), (n_pairs,), generator=self.generator,
                                     device=self.device)]
        return self._own_pairs(users, 1)[:, 0]

    def _own_pairs(self, users: torch.Tensor, m: int) -> torch.Tensor:
        """m ids of each user's training pairs, uniform with replacement: int64 (B, m)."""
        import torch

        counts = self._counts[users][:, None]
        draws = torch.rand((len(users), m), generator=self.generator, dtype=torch.float64,
                           device=self.device)
        return self._indptr[users][:, None] + torch.minimum((draws * counts).long(), counts - 1)

    # -- negatives -----------------------------------------------------------------------------

    def negatives(self, users: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        import torch

        n = self.config.n_negatives
        shape = (n,) if self.config.negatives == "shared" else (len(users), n)
        if self.config.pool == "popularity":
            flat = torch.multinomial(self._probs, math.prod(shape), replacement=True,
                                     generator=self.generator)
            items = flat.reshape(shape)
            return items, self._logq[items]
        items = torch.randint(self.n_items, shape, generator=self.generator, device=self.device)
        if self.config.pool == "all":
            return items, torch.full(shape, -math.log(self.n_items), device=self.device)
        items = self._redraw_labeled(users, items)
        pool = (self.n_items - self._counts[users]).to(torch.float32)
        return items, (-torch.log(pool))[:, None].expand(shape)

    def is_labeled(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        """Whether items[b, j] is a training item of users[b]: bool, shape of items."""
        import torch

        query = users[:, None] * self.n_items + items
        pos = torch.searchsorted(self._keys, query).clamp(max=len(self._keys) - 1)
        return self._keys[pos] == query

    def _redraw_labeled(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        """Redraw every item that is one of its user's training items (uniform over the rest:
        rejection sampling)."""
        import torch

        for _ in range(_MAX_REDRAWS):
            hit = self.is_labeled(users, items)
            if not hit.any():
                return items
            items[hit] = torch.randint(self.n_items, (int(hit.sum()),), generator=self.generator,
                                       device=self.device)
        raise ConfigError("model.sampling.pool=unlabeled: a user has almost every item; "
                          "use pool=all")

    # -- positives and the prior ---------------------------------------------------------------

    def positives(self, users: torch.Tensor) -> torch.Tensor:
        """M items uniform (with replacement) from each user's training items: int64 (B, M)."""
        return self.pair_items[self._own_pairs(users, self.config.n_positives)]

    def tau_plus(self, users: torch.Tensor) -> torch.Tensor:
        """τ⁺_u of the config's prior (`PositivePriorConfig`): float32 (B,)."""
        import torch

        counts = self._counts[users].to(torch.float32)
        return self.config.tau_plus_of(counts, self.n_items)
