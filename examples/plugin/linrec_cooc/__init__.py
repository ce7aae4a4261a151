"""An example linrec plugin. Importing it registers three pieces through linrec's documented
Python API (assignment into the registries):

* the model `cooccurrence`: score(u, j) = Σ_{i ∈ I_u} G_ij / (G_ii + shrink), G = XᵀX without
  its diagonal (an item-item co-occurrence recommender);
* the MF loss `squared_hinge`: mean_j relu(margin − s_pos + s_j)²;
* the estimator `rank_mapping`: every sampled rank r stands for the global rank
  1 + ⌊(r − 1)(N − 1)/(n − 1)⌋.
"""

from linrec.eval.estimators import ESTIMATORS, EstimatorSpec
from linrec.models import MODEL_CONFIGS
from linrec.models.losses import LOSS_CONFIGS
from linrec_cooc.estimator import run_rank_mapping
from linrec_cooc.loss import SquaredHingeLoss
from linrec_cooc.model import CooccurrenceConfig

MODEL_CONFIGS["cooccurrence"] = CooccurrenceConfig
LOSS_CONFIGS["squared_hinge"] = SquaredHingeLoss
ESTIMATORS["rank_mapping"] = EstimatorSpec("rank_mapping", run_rank_mapping)
