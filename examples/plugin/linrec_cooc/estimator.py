"""The rank-mapping estimator: each sampled rank maps to one global rank."""

import numpy as np


def run_rank_mapping(run):
    """P̂(R): the share of targets at sampled rank r, put at the global rank
    1 + ⌊(r − 1)(N − 1)/(n − 1)⌋."""
    p_hat = np.zeros(run.n_items)
    ranks = np.arange(1, run.sample_size + 1)
    global_ranks = 1 + np.floor((ranks - 1) * (run.n_items - 1) / (run.sample_size - 1))
    np.add.at(p_hat, global_ranks.astype(int) - 1, run.histogram / run.histogram.sum())
    return run.result(p_hat)
