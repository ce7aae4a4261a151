"""The parameters of every model: one typed config per model (`model=<name>` selects it).

A model is built from its config (`EASE(lam=300)` is `EASE(EASEConfig(lam=300))`) and reads its
parameters from it, so the Python defaults here are the YAML defaults (`conf/model/*.yaml` only
select and preset these dataclasses through Hydra's ConfigStore, `linrec.config`). Every value is
checked on construction (`linrec.params`); messages name `<model>.<field>`.

Ranks default to `None` = sized by the catalogue: min(cap, n_items // divisor), at least
min(8, n_items) (`ModelConfig.rank_for`); the cap and divisor reproduce the published rank on the
published dataset (e.g. LRR: 2000 on ML-20M's 20 108 items) and scale down on small catalogues.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from linrec.errors import ConfigError
from linrec.models.device import DEVICE_DOC, check_device_name
from linrec.models.positive_prior import PositivePriorConfig
from linrec.models.samplers import SamplingConfig
from linrec.params import FLOAT_DTYPES, Params, chosen_config, param
from linrec.registry import Registry

SOLVERS = ("cholesky", "cg")
BACKENDS = ("torch", "numpy", "numba")
CONFIDENCES = ("alpha", "one_plus_alpha")
#: family of the models whose fit gives a dense item-item W (`weights()`): a nearby model can
#: start from any of them
DENSE_ITEM_ITEM = "dense_item_item"
#: family of the spectral filters of the Gram matrix (`linrec.models.spectral`): a grid over one
#: of them shares one eigendecomposition
SPECTRAL_FILTER = "spectral_filter"


@dataclass
class ModelConfig(Params):
    """Base of the model configs. `name` is the registry name (`model=<name>`); `model_path`
    the "module:Class" built from it; `rank_rule` (cap, divisor) of an auto-sized rank;
    `families` the families it belongs to."""

    where = "model"
    model_path: ClassVar[str] = ""
    rank_rule: ClassVar[tuple[int, int] | None] = None
    #: the families the model belongs to (DENSE_ITEM_ITEM, SPECTRAL_FILTER): what other code may
    #: do with it, read from the registry entry, so that a plugin model joins them too
    families: ClassVar[frozenset[str]] = frozenset()

    name: str = ""

    def label(self) -> str:
        return self.name or self.where

    @classmethod
    def from_mapping(cls, values: Any, where: str | None = None) -> ModelConfig:
        if isinstance(values, Mapping):
            unknown = sorted(set(map(str, values)) - set(cls.names()))
            if unknown:
                name = cls.__dataclass_fields__["name"].default
                allowed = [n for n in cls.names() if n != "name"]
                raise ConfigError(f"model {name!r} has no parameter(s) {unknown}; allowed: "
                                  f"{allowed or 'none'}")
        return super().from_mapping(values, where)

    def check(self) -> None:
        expected = type(self).__dataclass_fields__["name"].default
        if self.name != expected:
            raise ConfigError(f"model.name={self.name!r} does not match its config "
                              f"{type(self).__name__} ({expected!r}); choose a model with "
                              f"model=<name>")
        if "device" in type(self).__dataclass_fields__:
            check_device_name(self.device, f"{self.name}.device")

    def rank_for(self, n_items: int) -> int:
        """The rank to use on `n_items` items: `rank`, or min(cap, n_items // divisor) (at least
        min(8, n_items)) when it is None; ConfigError when an explicit rank exceeds n_items."""
        rank = getattr(self, "rank", None)
        if rank is None:
            cap, divisor = self.rank_rule or (n_items, 1)
            return max(min(8, n_items), min(cap, n_items // divisor))
        if rank > n_items:
            raise ConfigError(f"{self.name}.rank={rank} exceeds n_items={n_items}; allowed: "
                              f"1..{n_items}, or null to size it by the catalogue")
        return int(rank)


def _dtype(default: str) -> Any:
    return param(default, choices=FLOAT_DTYPES, doc="floating-point type of the fit")


def _threads() -> Any:
    return param(0, ge=0, doc="BLAS and worker threads during fit (0 = all cores)")


def _device() -> Any:
    return param("cpu", doc=DEVICE_DOC)


def _rank(doc: str) -> Any:
    return param(None, ge=1, doc=doc)


# --- EASE family (Steck 2019; Li 2023, eq. 100; Steck 2020; Jin & Li 2023, Theorems 2 and 3) ------


@dataclass
class EASEConfig(ModelConfig):
    families = frozenset({DENSE_ITEM_ITEM})
    model_path = "linrec.models.ease:EASE"
    name: str = "ease"
    lam: float = param(500.0, ge=0, doc="λ; published: 400 (ML-20M), 1000 (Netflix)")
    dtype: str = _dtype("float32")
    num_threads: int = _threads()
    device: str = _device()


@dataclass
class DLAEConfig(ModelConfig):
    families = frozenset({DENSE_ITEM_ITEM})
    model_path = "linrec.models.ease:DLAE"
    name: str = "dlae"
    p: float = param(0.25, ge=0, lt=1, doc="dropout probability")
    lam: float = param(10.0, ge=0, doc="extra L2 (irspack form)")
    dtype: str = _dtype("float32")
    num_threads: int = _threads()
    device: str = _device()


@dataclass
class EDLAEConfig(DLAEConfig):
    model_path = "linrec.models.ease:EDLAE"
    name: str = "edlae"


@dataclass
class LowRankEDLAEConfig(DLAEConfig):
    model_path = "linrec.models.ease:LowRankEDLAE"
    rank_rule = (1000, 20)
    name: str = "edlae_lowrank"
    rank: int | None = _rank("rank of B; published 1000 (ML-20M, Netflix); null: "
                             "min(1000, n_items // 20)")
    n_iter: int = param(50, ge=1, doc="max ADMM iterations")
    tol: float = param(1e-6, gt=0, doc="ADMM stops at residual < tol · max(1, max |β|)")
    omega: float = param(10.0, gt=0, doc="ω of the ADMM penalty Ω = Λ + ωI")

    def check(self) -> None:
        super().check()
        if self.device != "cpu":
            raise ConfigError(f"{self.name}.device={self.device!r}: the low-rank ADMM runs on "
                              "the CPU only; use device=cpu, or model=edlae on the device")


@dataclass
class DebiasedEASEConfig(ModelConfig):
    families = frozenset({DENSE_ITEM_ITEM})
    model_path = "linrec.models.ease:DebiasedEASE"
    name: str = "debiased_ease"
    lam: float = param(500.0, ge=0, doc="λ")
    alpha: float = param(0.5, ge=0, lt=1, doc="α = (c−1)/c; 0.5 is c = 2, debiased iALS's "
                                              "default prior (prior_alpha = 1)")
    dtype: str = _dtype("float32")
    num_threads: int = _threads()
    device: str = _device()


# --- baselines ---------------------------------------------------------------------------------


@dataclass
class MostPopularConfig(ModelConfig):
    model_path = "linrec.models.baselines:MostPopular"
    name: str = "most_popular"


@dataclass
class ItemKNNConfig(ModelConfig):
    model_path = "linrec.models.baselines:ItemKNN"
    name: str = "itemknn"
    k: int = param(100, ge=1, doc="neighbours per item")
    shrink: float = param(0.0, ge=0, doc="added to the norms' product in the cosine's denominator")


@dataclass
class SLIMConfig(ModelConfig):
    model_path = "linrec.models.baselines:SLIM"
    name: str = "slim"
    l1: float = param(1.0, ge=0, doc="L1 weight of the elastic net")
    l2: float = param(10.0, ge=0, doc="L2 weight of the elastic net")
    max_iter: int = param(1000, ge=1, doc="coordinate-descent sweeps per column")
    tol: float = param(1e-4, gt=0, doc="coordinate-descent tolerance")
    n_jobs: int = param(1, ge=-1, doc="joblib processes over columns (-1 = all cores)")

    def check(self) -> None:
        super().check()
        if self.l1 + self.l2 <= 0:
            raise ConfigError(f"slim.l1={self.l1}, slim.l2={self.l2}: allowed: l1 + l2 > 0")
        if self.n_jobs == 0:
            raise ConfigError("slim.n_jobs=0 is not allowed; use >= 1, or -1 for all cores")


# --- spectral models (Jin et al. 2021; Li 2023, eqs. 66–70; eqs. 72–74) ------------------


@dataclass
class LRRConfig(ModelConfig):
    families = frozenset({SPECTRAL_FILTER})
    model_path = "linrec.models.spectral:LRR"
    rank_rule = (2000, 10)
    name: str = "lrr"
    rank: int | None = _rank("k; published 2000 (ML-20M), 3000 (Netflix); null: "
                             "min(2000, n_items // 10)")
    lam: float = param(1e4, ge=0, doc="λ; published 1e4 (ML-20M), 4e4 (Netflix)")
    dropout: float = param(0.0, ge=0, lt=1, doc="> 0: low-rank DLAE (eq. 68)")
    gamma: Any = param(None, doc="explicit Γ, (n_items,) or (r, n_items); Python only")
    dtype: str = _dtype("float64")
    device: str = _device()

    def check(self) -> None:
        super().check()
        if self.gamma is not None:
            self.gamma = np.asarray(self.gamma, dtype=np.float64)
            if self.gamma.ndim not in (1, 2) or not np.all(np.isfinite(self.gamma)):
                raise ConfigError(f"lrr.gamma must be a finite (n_items,) vector or (r, n_items) "
                                  f"matrix, got shape {self.gamma.shape}")
        if self.device != "cpu" and (self.dropout > 0 or self.gamma is not None):
            raise ConfigError(f"lrr.device={self.device!r}: the general closed form (dropout > 0 "
                              "or gamma, eq. 68) runs on the CPU only; the spectral one "
                              "(dropout=0, no gamma) runs on the device")


@dataclass
class PureSVDConfig(ModelConfig):
    families = frozenset({SPECTRAL_FILTER})
    model_path = "linrec.models.spectral:PureSVD"
    rank_rule = (128, 100)
    name: str = "puresvd"
    rank: int | None = _rank("k; best of the published grid 128 (ML-20M, Netflix; smaller is "
                             "better there); null: min(128, n_items // 100)")
    dtype: str = _dtype("float64")
    device: str = _device()


@dataclass
class ClosedFormMFConfig(ModelConfig):
    families = frozenset({SPECTRAL_FILTER})
    model_path = "linrec.models.spectral:ClosedFormMF"
    rank_rule = (1000, 20)
    name: str = "mf_closed"
    rank: int | None = _rank("k; published 1000 (ML-20M, Netflix); null: "
                             "min(1000, n_items // 20)")
    lam: float | None = param(None, ge=0, doc="λ′; published 50 (ML-20M), 100 (Netflix); null: "
                                              "σ_k, the singular value at the rank cut")
    dtype: str = _dtype("float64")
    device: str = _device()


@dataclass
class RidgeConfig(ModelConfig):
    families = frozenset({SPECTRAL_FILTER})
    model_path = "linrec.models.spectral:Ridge"
    name: str = "ridge"
    lam: float = param(1e4, ge=0,
                       doc="λ of the full-rank ridge regression (EASE without the zero diagonal)")
    dtype: str = _dtype("float64")
    device: str = _device()


# --- factor models (Hu et al. 2008; Li 2023, eq. 64; Jin & Li 2023, Theorems 2 and 3) -------------


@dataclass
class IALSConfig(ModelConfig):
    model_path = "linrec.models.als:IALS"
    name: str = "ials"
    factors: int = param(64, ge=1, doc="embedding dimension")
    reg: float = param(0.01, ge=0, doc="λ")
    alpha0: float = param(0.1, ge=0, doc="α₀, weight of the unobserved entries")
    nu: float = param(1.0, ge=0, doc="ν of the frequency-scaled λ(|I_u| + α₀|I|)^ν")
    epochs: int = param(16, ge=1, doc="alternating sweeps over users and items")
    solver: str = param("cholesky", choices=SOLVERS, doc="cholesky (exact) | cg")
    cg_steps: int = param(3, ge=1, doc="conjugate-gradient steps per row (solver=cg)")
    backend: str = param("numba", choices=BACKENDS,
                         doc="numba (compiled row solvers, fastest) | torch | numpy; same "
                             "numbers to rounding")
    block_size: int = param(4096, ge=1, doc="max rows solved together (numpy, torch)")
    seed: int = param(0, ge=0, doc="the run seed in configs")
    init_std: float = param(0.1, ge=0, doc="factors start as N(0, init_std²/factors)")
    dtype: str = _dtype("float32")
    num_threads: int = _threads()
    record_loss: bool = param(True, doc="objective after each epoch into loss_history_")
    device: str = param("cpu", doc="cpu | cuda | cuda:<n>; a device other than cpu needs "
                                   "backend=torch (the sweeps run there, the factors come back)")

    def check(self) -> None:
        super().check()
        if self.device != "cpu" and self.backend != "torch":
            raise ConfigError(f"{self.name}.device={self.device!r} runs through torch; add "
                              f"{self.name}.backend=torch (backend={self.backend!r} is CPU only)")


@dataclass
class DebiasedIALSConfig(IALSConfig, PositivePriorConfig):
    """Debiased iALS: iALS's fields and the prior's (`PositivePriorConfig`; with ratio_alpha
    the confidence c_u = 1 + prior_alpha for every user)."""

    model_path = "linrec.models.als:DebiasedIALS"
    name: str = "debiased_ials"

    def check(self) -> None:
        super().check()
        if not self.alpha0 < 1:
            raise ConfigError(f"debiased_ials.alpha0={self.alpha0} is out of range; allowed: "
                              "[0, 1)")


@dataclass
class WMFConfig(ModelConfig):
    model_path = "linrec.models.als:WMF"
    name: str = "wmf"
    factors: int = param(100, ge=1, doc="published 100 (ML-20M, Netflix)")
    reg: float = param(100.0, ge=0, doc="λ; published 100")
    alpha: float = param(10.0, ge=0, doc="published C = 10 (ML-20M), 5 (Netflix)")
    confidence: str = param("alpha", choices=CONFIDENCES,
                            doc="alpha: c = alpha (implicit) | one_plus_alpha: c = 1 + alpha")
    iterations: int = param(15, ge=1, doc="ALS sweeps (implicit's iterations)")
    seed: int = param(0, ge=0, doc="seed of the factors (the run seed in configs)")
    use_cg: bool = param(True, doc="implicit's conjugate-gradient solver (false: Cholesky)")
    num_threads: int = _threads()
    dtype: str = _dtype("float32")
    record_loss: bool = param(False,
                              doc="objective after each iteration into loss_history_ (slower)")

    def check(self) -> None:
        super().check()
        if self.confidence == "alpha" and self.alpha <= 0:
            raise ConfigError(f"wmf.alpha={self.alpha} gives observed confidence {self.alpha}; "
                              "it must be > 0 (or use confidence=one_plus_alpha)")


# --- models trained by epochs (linrec.models.training) ----------------------------------------


@dataclass
class ResumableConfig(Params):
    """The checkpoint fields of a model trained by the epoch driver."""

    checkpoint_dir: str | None = param(None, doc="null: $LINREC_DATA/checkpoints/<config hash>")
    resume: bool = param(True, doc="continue from this config's last epoch checkpoint")


# --- nearby models (Jin et al. 2021, §3.4) --------------------------------------------------------


@dataclass
class BPRTrainerConfig(ModelConfig, ResumableConfig):
    """The BPR + Adam trainer shared by the nearby models (Li 2023, §3.4.1)."""

    rmd: bool = param(False, doc="remove diag(W) (eq. 76 RMD)")
    dropout: float = param(0.0, ge=0, lt=1, doc="input dropout while training")
    bpr_scale: float = param(10.0, gt=0, doc="t in −log σ(t (s_ui − s_uj)); not published")
    lr: float = param(0.01, gt=0, doc="Adam learning rate")
    epochs: int = param(10, ge=0, doc="at most this many epochs")
    batch_size: int = param(2048, ge=1, doc="users per step")
    n_pairs: int = param(16, ge=1, doc="positive/negative pairs per user and batch")
    patience: int = param(0, ge=0, doc="early stopping on the validation selection metric "
                                      "(0 = off)")
    seed: int = param(0, ge=0, doc="seed of the batches and pairs (the run seed in configs)")
    dtype: str = _dtype("float32")
    device: str = param("cpu", doc="cpu | cuda | cuda:<n>")


@dataclass
class LearnedLambdaConfig(BPRTrainerConfig):
    model_path = "linrec.models.nearby:LearnedLambda"
    rank_rule = (2000, 10)
    name: str = "learned_lambda"
    rank: int | None = _rank("published 2000 (ML-20M); null: min(2000, n_items // 10)")
    lam: float = param(8000.0, gt=0, doc="published 8000 (ML-20M), 40000 (Netflix)")
    c: float = param(1000.0, ge=0, doc="λ_i ∈ (λ − c, λ + c); published 1000, 5000")
    head_tail: bool = param(False, doc="also learn H, T")

    def check(self) -> None:
        super().check()
        if not self.c < self.lam:
            raise ConfigError(f"learned_lambda.c={self.c} is out of range; allowed: [0, lam) "
                              f"with lam={self.lam}")


@dataclass
class NearbyHTConfig(BPRTrainerConfig):
    model_path = "linrec.models.nearby:NearbyItemItem"
    name: str = "nearby_ht"
    base: str = param("edlae", choices=lambda: models_in(DENSE_ITEM_ITEM),
                      doc="the item-item model giving W (a model of the dense_item_item family)")
    base_params: dict[str, Any] = param({"p": 0.25, "lam": 10.0, "dtype": "float32"},
                                        doc="fields of the base model's config")
    head_tail: bool = param(True, doc="learn the head and tail scalings H, T (eq. 76)")
    sparsify: bool = param(False, doc="keep only W entries above sparsify_threshold")
    sparsify_threshold: float = param(float("-inf"), finite=False,
                                      doc="keep W entries above it (-inf: all)")
    dropout: float = param(0.5, ge=0, lt=1, doc="input dropout while training")
    batch_size: int = param(512, ge=1, doc="users per step")

    def check(self) -> None:
        super().check()
        if not (self.head_tail or self.sparsify or self.rmd):
            raise ConfigError(f"{self.name}: enable at least one of head_tail, sparsify, rmd")


@dataclass
class NearbySparseConfig(NearbyHTConfig):
    name: str = "nearby_sparse"
    head_tail: bool = param(False, doc="learn the head and tail scalings H, T (eq. 76)")
    sparsify: bool = param(True, doc="keep only W entries above sparsify_threshold")
    sparsify_threshold: float = param(0.0, finite=False, doc="not published")


# --- MF trained with a loss (Li 2023, §4.4.1) ------------------------------------------------


@dataclass
class MFConfig(ModelConfig, ResumableConfig):
    """MF trained with the loss `loss` (`loss=<name>` on the command line) and the sampler
    `sampling`. Defaults: SimpleX's MF-CCL settings on Gowalla (Mao et al. 2021) where the
    dissertation is silent (d = 64, cosine, init N(0, 1e-4), user dropout 0.1, Adam lr 1e-4, batch
    512, 800 negatives, grad-norm 10); the schedule is the dissertation's (lr × 0.5 on a plateau,
    stop at a plateau once the rate is 1e-6)."""

    model_path = "linrec.models.mf:MF"
    name: str = "mf"
    dim: int = param(64, ge=1, doc="embedding dimension")
    similarity: str = param("cosine", choices=("cosine", "dot"),
                            doc="cosine: scores are cosines of the embeddings; dot: inner "
                                "products")
    temperature: float = param(1.0, gt=0, doc="scores are similarity / temperature")
    init_std: float = param(1e-4, gt=0, doc="embeddings start as N(0, init_std²)")
    dropout: float = param(0.1, ge=0, lt=1, doc="user-embedding dropout during training")
    reg: float = param(1e-8, ge=0, doc="L2 weight: reg/2 · ‖·‖²")
    reg_mode: str = param("full_table", choices=("full_table", "batch_rows"),
                          doc="full_table: L2 on every row of both tables in every step "
                              "(SimpleX); batch_rows: on the rows a step scores")
    loss: Any = field(default_factory=lambda: _default_loss(),
                      metadata={"doc": "the loss (loss=<name> chooses it; its fields are under "
                                       "model.loss.*)"})
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    lr: float = param(1e-4, gt=0, doc="Adam learning rate at the start")
    optimizer: str = param("adam", choices=("adam", "sparse_adam"),
                           doc="sparse_adam: torch's lazy Adam, only the rows a step touches "
                               "are updated (shared negatives, batch_rows L2 or none)")
    batch_size: int = param(512, ge=1, doc="(user, positive) pairs per step")
    epochs: int = param(100, ge=1, doc="at most this many epochs")
    grad_clip: float = param(10.0, ge=0, doc="max gradient norm (0 = off)")
    eval_every: int = param(1, ge=1, doc="epochs between validation passes")
    lr_factor: float = param(0.5, gt=0, le=1, doc="lr × factor on a plateau (SimpleX: 0.1)")
    lr_patience: int = param(0, ge=0, doc="non-improving evaluations before a plateau")
    min_lr: float = param(1e-6, gt=0, doc="the rate is not cut below this")
    min_delta: float = param(0.0, ge=0, doc="an evaluation improves when it beats the best by "
                                            "more than this (SimpleX: 1e-6)")
    reload_best_on_plateau: bool = param(False, doc="SimpleX: true")
    stop_patience: int = param(0, ge=0, doc="stop after this many non-improving evaluations; "
                                            "0: at a plateau once lr = min_lr")
    select_on: str = param("valid", choices=("valid", "test"),
                           doc="test: the published LightGCN/BARS protocol (recorded as such)")
    device: str = param("cpu", doc="cpu | cuda | cuda:<n>")
    seed: int = param(0, ge=0,
                      doc="seed of the initialization, batches and negatives (the run seed in "
                          "configs)")
    num_threads: int = _threads()

    def check(self) -> None:
        super().check()
        from linrec.models.losses import LOSS_CONFIGS

        if self.loss is None:
            self.loss = _default_loss()
        self.loss = chosen_config(self.loss, LOSS_CONFIGS, "loss")
        if self.loss.cosine and self.similarity != "cosine":
            raise ConfigError(f"loss {self.loss.name} is defined for cosine scores: set "
                              f"model.similarity=cosine (now {self.similarity})")
        if self.optimizer == "sparse_adam":
            self._check_sparse_adam()

    def _check_sparse_adam(self) -> None:
        """sparse_adam updates only the rows a step's gradient touches: the L2 term of
        `full_table` touches every row, and per-example negatives or a full-catalogue loss
        touch nearly every item (nothing to gain, and a dense gradient)."""
        if self.reg > 0 and self.reg_mode == "full_table":
            raise ConfigError(f"model.optimizer=sparse_adam updates only the rows of a step; "
                              f"model.reg={self.reg:g} with reg_mode=full_table touches every "
                              "row: set model.reg_mode=batch_rows or model.reg=0")
        if self.loss.full_catalogue:
            raise ConfigError(f"model.optimizer=sparse_adam: loss {self.loss.name} scores every "
                              "item, so every row changes each step: use model.optimizer=adam")
        if self.sampling.negatives != "shared":
            raise ConfigError("model.optimizer=sparse_adam needs model.sampling.negatives="
                              f"shared (now {self.sampling.negatives}): per-example negatives "
                              "touch nearly every item each step; use model.optimizer=adam")


def _default_loss() -> Any:
    from linrec.models.losses import CCLLoss

    return CCLLoss()


#: every model config, by registry name
MODEL_CONFIGS: Registry[type[ModelConfig]] = Registry.of_configs("model.name", (
    EASEConfig, DLAEConfig, EDLAEConfig, LowRankEDLAEConfig, DebiasedEASEConfig,
    MostPopularConfig, ItemKNNConfig, SLIMConfig, LRRConfig, PureSVDConfig, ClosedFormMFConfig,
    RidgeConfig, IALSConfig, DebiasedIALSConfig, WMFConfig, LearnedLambdaConfig, NearbyHTConfig,
    NearbySparseConfig, MFConfig))


def models_in(family: str) -> list[str]:
    """The registered model names of a family (DENSE_ITEM_ITEM, SPECTRAL_FILTER), in
    registry order."""
    return [name for name, config in MODEL_CONFIGS.items() if family in config.families]
