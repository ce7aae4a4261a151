"""Typed configs of the `data` block: one per data source, one per split protocol, the filters,
and `DataConfig` that holds them (`data=<preset>` selects a preset in conf/data/).

`data.path`, `data.variant` and `data.download` are shortcuts: when set they replace the source's
`path`, `variant` and `download` (`DataConfig.resolved_source`), so `linrec data=movielens
data.path=/data/ml-1m.zip` needs no `data.source.` prefix.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

from linrec.errors import ConfigError
from linrec.params import Params, chosen_config, param
from linrec.registry import Registry

# --- sources ----------------------------------------------------------------------------------


@dataclass
class SourceConfig(Params):
    """Base of the source configs: `name` selects it; `loader` is the "module:function" that
    loads it with the remaining fields as keyword arguments."""

    where = "data.source"
    loader: ClassVar[str] = ""

    name: str = ""

    def check(self) -> None:
        expected = type(self).__dataclass_fields__["name"].default
        if self.name != expected:
            raise ConfigError(f"data.source.name={self.name!r} does not match its config "
                              f"{type(self).__name__} ({expected!r})")

    def dataset_name(self) -> str:
        """The label of the data when `data.name` is not set."""
        return self.name

    def loader_params(self) -> dict[str, Any]:
        """The keyword arguments of the loader: every field but `name`."""
        return {n: getattr(self, n) for n in self.names() if n != "name"}


@dataclass
class SyntheticSource(SourceConfig):
    """Seeded implicit feedback with low-rank preferences, power-law item popularity and
    log-normal user activity (linrec/data/sources/synthetic.py)."""

    loader = "linrec.data.sources.synthetic:load"
    name: str = "synthetic"
    n_users: int = param(6000, ge=1, doc="users generated")
    n_items: int = param(2000, ge=1, doc="items generated (items never picked drop out)")
    rank: int = param(16, ge=1, doc="dimension of the latent preferences")
    mean_user_interactions: float = param(35.0, gt=0, doc="mean of the log-normal user activity")
    activity_sigma: float = param(0.8, ge=0, doc="σ of the log-normal user activity")
    popularity_exponent: float = param(1.0, ge=0, doc="item weight (1 + popularity rank)^−exponent")
    preference_strength: float = param(2.5, ge=0,
                                       doc="weight of the latent preferences against popularity")
    min_user_interactions: int = param(3, ge=1, doc="fewest items a user picks")
    max_user_interactions: int | None = param(None, ge=1, doc="null: n_items // 4")
    seed: int = param(0, ge=0, doc="seed of the generator (part of the dataset's definition)")


@dataclass
class _FileSource(SourceConfig):
    """A source read from `path` (a file, a directory or an archive), or from the download
    cache under $LINREC_DATA (fetched first when `download` and a public URL exists)."""

    path: str | None = param(None,
                             doc="the file, directory or archive to read; null: the download "
                                 "cache")
    download: bool = param(False, doc="fetch the public file into the cache when it is missing")
    cache_dir: str | None = param(None, doc="null: $LINREC_DATA (default ~/.cache/linrec)")


@dataclass
class MovieLensSource(_FileSource):
    loader = "linrec.data.sources.movielens:load"
    name: str = "movielens"
    variant: str = param("ml-1m", doc="ml-100k | ml-1m | ml-10m | ml-20m | ml-25m | ml-32m | "
                                      "ml-latest-small")

    def dataset_name(self) -> str:
        return f"movielens-{self.variant}"


@dataclass
class NetflixSource(_FileSource):
    loader = "linrec.data.sources.netflix:load"
    name: str = "netflix"


@dataclass
class MSDSource(_FileSource):
    loader = "linrec.data.sources.msd:load"
    name: str = "msd"


@dataclass
class LightGCNSource(_FileSource):
    """A LightGCN-format directory (train.txt, test.txt); `variant` names a published split
    (gowalla | yelp2018 | amazon-book) to download or find in the cache, and is not needed
    with `path`: a directory of your own is named after itself."""

    loader = "linrec.data.sources.lightgcn:load"
    name: str = "lightgcn"
    variant: str | None = param(None,
                                doc="gowalla | yelp2018 | amazon-book (a published split); null "
                                    "with path: named after the directory")

    def dataset_name(self) -> str:
        if self.variant is None and self.path is not None:
            return f"lightgcn-{Path(self.path).name}"
        return f"lightgcn-{self.variant or 'gowalla'}"


@dataclass
class NCFSource(_FileSource):
    """An NCF-format split (<name>.train.rating, .test.rating, .test.negative)."""

    loader = "linrec.data.sources.ncf:load"
    name: str = "ncf"
    variant: str | None = param(None, doc="ml-1m | pinterest-20; null with path: the file prefix")

    def dataset_name(self) -> str:
        if self.variant is None and self.path is not None:
            return f"ncf-{Path(self.path).name}"
        return f"ncf-{self.variant or 'ml-1m'}"


@dataclass
class TabularSource(SourceConfig):
    """Any CSV / TSV / Parquet file with a column mapping."""

    loader = "linrec.data.sources.tabular:load"
    name: str = "tabular"
    path: str | None = param(None, doc="the CSV, TSV or Parquet file")
    user_col: str = param("user", doc="column of the user ids")
    item_col: str = param("item", doc="column of the item ids")
    rating_col: str | None = param(None,
                                   doc="column of the ratings (with data.filters.min_rating); "
                                       "null: implicit")
    timestamp_col: str | None = param(None,
                                      doc="column of the event times (needed by "
                                          "data.split.order=latest)")
    sep: str | None = param(None, doc="null: from the suffix (.csv ',', .tsv tab)")

    def dataset_name(self) -> str:
        return Path(self.path).stem if self.path else self.name


SOURCE_CONFIGS: Registry[type[SourceConfig]] = Registry.of_configs("data.source.name", (
    SyntheticSource, MovieLensSource, NetflixSource, MSDSource, LightGCNSource, NCFSource,
    TabularSource), kind="data source")


# --- split protocols --------------------------------------------------------------------------


@dataclass
class SplitConfig(Params):
    """Base of the split protocols: `kind` selects it; `protocol` names the function
    ("module:function", e.g. in `linrec.data.splits`) that splits the data; the other fields
    are its keyword arguments."""

    where = "data.split"
    protocol: ClassVar[str] = ""
    kind: str = ""

    def check(self) -> None:
        expected = type(self).__dataclass_fields__["kind"].default
        if self.kind != expected:
            raise ConfigError(f"data.split.kind={self.kind!r} does not match its config "
                              f"{type(self).__name__} ({expected!r})")

    def protocol_params(self) -> dict[str, Any]:
        """The keyword arguments of the protocol function: every field but `kind`."""
        return {n: getattr(self, n) for n in self.names() if n != "kind"}


@dataclass
class HoldoutSplit(SplitConfig):
    """Per-user holdout (weak generalization): a random (or, order=latest, the latest) fraction
    of each user's items is held out for test, another for validation. order=temporal, its
    earlier name, still reads as latest."""

    protocol = "linrec.data.splits:holdout"
    kind: str = "holdout"
    test_fraction: float = param(0.2, gt=0, lt=1,
                                 doc="share of each user's items held out for test")
    valid_fraction: float = param(0.1, ge=0, lt=1,
                                  doc="share held out for validation (0: no validation split)")
    order: str = param("random", choices=("random", "latest", "temporal"),
                       doc="random | latest (the user's latest items), as leave-one-out's")
    seed: int = param(12345, ge=0,
                      doc="seed of the split (part of the dataset's definition, not the run "
                          "seed)")
    test_foldin_includes_valid: bool = param(True,
                                             doc="the validation items are input (and masked) "
                                                 "when scoring test")

    def check(self) -> None:
        super().check()
        if self.order == "temporal":  # one name for "by time" across the split protocols
            object.__setattr__(self, "order", "latest")


@dataclass
class LeaveOneOutSplit(SplitConfig):
    """Leave-one-out (weak generalization): one test item per user (and one validation item)."""

    protocol = "linrec.data.splits:leave_one_out"
    kind: str = "loo"
    order: str = param("random", choices=("random", "latest"),
                       doc="random: held-out items drawn at random; latest: the latest event "
                           "(needs timestamps)")
    valid: bool = param(True, doc="also hold out one validation item per user")
    seed: int = param(12345, ge=0,
                      doc="seed of the split (part of the dataset's definition, not the run "
                          "seed)")
    test_foldin_includes_valid: bool = param(True,
                                             doc="the validation item is input (and masked) when "
                                                 "scoring test")


@dataclass
class StrongSplit(SplitConfig):
    """Strong generalization exactly as Liang et al. 2018 (Liang et al. 2018): held-out
    users, 80/20 fold-in/targets, item vocabulary of the training users only."""

    protocol = "linrec.data.splits:strong_generalization"
    kind: str = "strong"
    n_valid_users: int = param(500, ge=0, doc="held-out validation users")
    n_test_users: int = param(500, ge=1, doc="held-out test users")
    test_prop: float = param(0.2, gt=0, lt=1,
                             doc="share of a held-out user's items that are targets (the rest is "
                                 "fold-in)")
    seed: int = param(98765, ge=0, doc="seed of the split (98765 in the published splits)")
    min_heldout_items: int = param(5, ge=1, doc="held-out users with fewer items get no targets")
    rng_stream: str = param("generator", choices=("generator", "vae_cf_notebook"),
                            doc="vae_cf_notebook replays the notebook's legacy random calls")


@dataclass
class PredefinedSplit(SplitConfig):
    """The published train/test files (lightgcn, ncf); valid_fraction > 0 takes a per-user
    validation holdout from the train rows."""

    protocol = "linrec.data.splits:predefined"
    kind: str = "predefined"
    valid_fraction: float = param(0.0, ge=0, lt=1,
                                  doc="share of each user's training items held out for "
                                      "validation (0: none, the published protocol)")
    seed: int = param(12345, ge=0, doc="seed of the validation holdout")
    test_foldin_includes_valid: bool = param(True,
                                             doc="the validation items are input (and masked) "
                                                 "when scoring test")


SPLIT_CONFIGS: Registry[type[SplitConfig]] = Registry.of_configs(
    "data.split.kind", (HoldoutSplit, LeaveOneOutSplit, StrongSplit, PredefinedSplit), key="kind",
    kind="split protocol")


# --- filters and the data block ---------------------------------------------------------------


@dataclass
class FiltersConfig(Params):
    """Binarize (value >= min_rating), then k-core (min interactions per user and item)."""

    where = "data.filters"
    min_rating: float | None = param(None, doc="null: keep every event")
    min_user_interactions: int = param(0, ge=0,
                                       doc="k-core: drop users with fewer interactions (0: none)")
    min_item_interactions: int = param(0, ge=0,
                                       doc="k-core: drop items with fewer interactions (0: none)")
    iterative: bool = param(True, doc="repeat the k-core until stable")


@dataclass
class DataConfig(Params):
    """data: where the interactions come from, how they are filtered and split, whether the
    prepared split is cached; plus the path/variant/download shortcuts of the source."""

    where = "data"

    source: Any = field(default_factory=SyntheticSource,
                        metadata={"doc": "where the interactions come from (data=<preset> "
                                         "chooses it)"})
    split: Any = field(default_factory=HoldoutSplit,
                       metadata={"doc": "how they are split (data/split=<kind> chooses it)"})
    filters: FiltersConfig = field(default_factory=FiltersConfig)
    name: str | None = param(None, doc="label of the data; null: from the source")
    cache: bool = param(True, doc="read/write the prepared split under $LINREC_DATA/splits")
    path: str | None = param(None, doc="shortcut for data.source.path")
    variant: str | None = param(None, doc="shortcut for data.source.variant")
    download: bool | None = param(None, doc="shortcut for data.source.download")

    SHORTCUTS: ClassVar[tuple[str, ...]] = ("path", "variant", "download")

    def check(self) -> None:
        try:
            self.source = chosen_config(self.source, SOURCE_CONFIGS, "data.source", "name")
        except ConfigError as exc:
            if "unknown field" not in str(exc):
                raise
            raise ConfigError(f"{exc}; to choose another source, use data/source=<name> or a "
                              "data=<preset>, which replace the source's fields "
                              "(data.source.name=<name> keeps the fields of the one before)"
                              ) from exc
        self.split = chosen_config(self.split, SPLIT_CONFIGS, "data.split", "kind")
        self.resolved_source()  # a shortcut the source does not have fails now

    def resolved_source(self) -> SourceConfig:
        """The source with the shortcuts applied."""
        values = {k: getattr(self, k) for k in self.SHORTCUTS if getattr(self, k) is not None}
        missing = sorted(k for k in values if k not in self.source.__dataclass_fields__)
        if missing:
            raise ConfigError(f"data.{missing[0]}={values[missing[0]]!r}: source "
                              f"{self.source.name!r} has no {missing[0]}")
        return replace(self.source, **values) if values else self.source

    def dataset_name(self) -> str:
        """The dataset's name in results: `name`, else the source's."""
        return self.name or self.resolved_source().dataset_name()

    def cache_key_data(self) -> dict[str, Any]:
        """What the prepared split depends on (the cache key): source, filters, split."""
        source = self.resolved_source().to_dict()
        if isinstance(source.get("path"), str):
            source["path"] = str(Path(source["path"]).expanduser())
        return {"source": source, "filters": self.filters.to_dict(), "split": self.split.to_dict()}
