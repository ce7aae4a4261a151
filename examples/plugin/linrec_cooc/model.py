"""The co-occurrence model: an item-item recommender whose W is the co-occurrence matrix
normalised by the item counts."""

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from linrec.models import ModelConfig, Recommender
from linrec.params import param


@dataclass
class CooccurrenceConfig(ModelConfig):
    """score(u, j) = Σ_{i ∈ I_u} G_ij / (G_ii + shrink)."""

    model_path = "linrec_cooc.model:Cooccurrence"
    name: str = "cooccurrence"
    shrink: float = param(10.0, ge=0, doc="added to each item's count")


class Cooccurrence(Recommender):
    """W_ij = G_ij / (G_ii + shrink) for i ≠ j, W_ii = 0, with G = XᵀX; scores = X_u W."""

    config_class = CooccurrenceConfig

    def _fit(self, train: sp.csr_matrix, validation) -> None:
        gram = (train.T @ train).toarray()
        counts = np.diag(gram).copy()
        np.fill_diagonal(gram, 0.0)
        self.weights_ = (gram / (counts + self.config.shrink)[:, None]).astype(np.float32)

    def _score(self, foldin: sp.csr_matrix, users) -> np.ndarray:
        return np.asarray(foldin @ self.weights_)

    def weights(self) -> np.ndarray:
        self.check_fitted()
        return self.weights_
