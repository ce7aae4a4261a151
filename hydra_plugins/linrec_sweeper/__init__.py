"""linrec's Hydra sweeper: Optuna that resumes (`hydra/sweeper=optuna`, conf/hydra/sweeper)."""
