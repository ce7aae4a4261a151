"""linrec's Hydra configs (YAML only): this file makes them the package `linrec.conf` of every
install (pyproject.toml maps it here), so that `importlib.resources` finds them."""
