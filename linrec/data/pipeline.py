"""prepare_data(config): source -> filters -> split protocol, cached under $LINREC_DATA/splits/.

`config` is a `DataConfig` (linrec.data.configs), or a plain mapping of its fields such as

    {"source": {"name": "synthetic", ...}, "filters": {...},
     "split": {"kind": "holdout" | "loo" | "strong" | "predefined", ...}, "cache": True}

(an OmegaConf DictConfig is a mapping). Unknown names and bad values raise ConfigError before
anything is loaded.
"""

from __future__ import annotations

import hashlib
import json
import logging
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from linrec.atomic import atomic_open
from linrec.cache import cache_home
from linrec.console import progress
from linrec.data.configs import DataConfig, FiltersConfig, PredefinedSplit, SplitConfig
from linrec.data.filters import apply_filters
from linrec.data.interactions import Interactions, PredefinedSplitData
from linrec.data.splits import EvalSet, Split
from linrec.errors import ConfigError
from linrec.registry import load

log = logging.getLogger(__name__)

#: bump when the cache layout or a protocol's output changes: old cache files are then ignored
CACHE_VERSION = 2


@dataclass(frozen=True)
class PreparedData:
    """A split ready for fitting and evaluation.

    stats: n_users, n_items, n_interactions of the filtered data; split_n_items,
    n_train_interactions; for each present EvalSet <label>_users, <label>_targets,
    <label>_foldin (label = valid / test)."""

    name: str
    split: Split
    stats: dict[str, Any]


def data_config(config: DataConfig | Mapping[str, Any]) -> DataConfig:
    """The checked DataConfig of a config or a mapping of its fields."""
    return config if isinstance(config, DataConfig) else DataConfig.from_mapping(config)


def prepare_data(config: DataConfig | Mapping[str, Any]) -> PreparedData:
    """Load, filter and split the data (see the module docstring).

    With cache (default) the result is read from / written to `cache_path(config)`; an
    unreadable or corrupt cache file is rebuilt."""
    config = data_config(config)
    name = config.dataset_name()
    path = cache_path(config)
    if config.cache and path.exists():
        try:
            prepared = _read_cache(path, name)
            log.info("data %s (cached split %s): %s", name, path, prepared.stats)
            return prepared
        except (OSError, ValueError, KeyError, zipfile.BadZipFile) as err:
            log.warning("split cache %s is unreadable (%s); rebuilding it", path, err)

    from linrec.data import sources  # late import: the readers are heavy and optional

    with progress(f"prepare {name}", 3, unit="stages") as shown:
        shown.update("reading")
        data = sources.load_source(config.resolved_source())
        shown.advance()
        shown.update("filtering and splitting")
        split, stats = _build_split(data, config.filters, config.split)
        prepared = PreparedData(name, split, stats)
        shown.advance()
        if config.cache:
            shown.update("caching the split")
            _write_cache(path, prepared)
        shown.advance()
    log.info("data %s: %s", name, stats)
    return prepared


def cache_path(config: DataConfig | Mapping[str, Any]) -> Path:
    """$LINREC_DATA/splits/<first 16 hex of sha256(canonical JSON of what the split depends on:
    source, filters, split, the data files' sizes and times)>.npz ($LINREC_DATA defaults to
    ~/.cache/linrec)."""
    config = data_config(config)
    key = config.cache_key_data()
    try:
        canonical = json.dumps({"cache_version": CACHE_VERSION, "data": key,
                                "files": _file_fingerprint(key["source"].get("path"))},
                               sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"data config is not plain JSON data ({err})") from err
    digest = hashlib.sha256(canonical.encode()).hexdigest()[:16]
    return cache_home() / "splits" / f"{digest}.npz"


def _file_fingerprint(path: Any) -> list[list[Any]]:
    """(relative name, size, mtime_ns) of the source file or of every file below the source
    directory, so that an edited or replaced data file never reuses a stale cached split."""
    if not path:
        return []
    root = Path(str(path)).expanduser()
    if root.is_file():
        st = root.stat()
        return [[root.name, st.st_size, st.st_mtime_ns]]
    if root.is_dir():
        files = sorted(p for p in root.rglob("*") if p.is_file())
        return [[str(p.relative_to(root)), p.stat().st_size, p.stat().st_mtime_ns] for p in files]
    return []


def split_stats(split: Split) -> dict[str, Any]:
    """Counts of a Split: split_n_items, n_train_users (non-empty train rows),
    n_train_interactions and <label>_users / _targets / _foldin per EvalSet."""
    stats: dict[str, Any] = {
        "split_n_items": int(split.n_items),
        "n_train_users": int((np.diff(split.train.indptr) > 0).sum()),
        "n_train_interactions": int(split.train.nnz),
    }
    for label, eval_set in (("valid", split.valid), ("test", split.test)):
        if eval_set is not None:
            stats[f"{label}_users"] = int(eval_set.n_users)
            stats[f"{label}_targets"] = int(eval_set.targets.nnz)
            stats[f"{label}_foldin"] = int(eval_set.foldin.nnz)
    return stats


def _build_split(
    data: Interactions | PredefinedSplitData,
    filters: FiltersConfig,
    split_config: SplitConfig,
) -> tuple[Split, dict[str, Any]]:
    is_predefined = isinstance(split_config, PredefinedSplit)
    if isinstance(data, PredefinedSplitData) and not is_predefined:
        raise ConfigError(
            f"source {data.name!r} gives a published train/test split; set data.split.kind: "
            "predefined (data/split=predefined)"
        )
    if not isinstance(data, PredefinedSplitData) and is_predefined:
        raise ConfigError(
            "data.split.kind: predefined needs a source with published train/test files "
            f"(lightgcn, ncf); source {data.name!r} gave plain interactions"
        )
    protocol = load(split_config.protocol)
    if is_predefined:
        if filters != FiltersConfig():
            raise ConfigError(
                "data.filters are not applied to a predefined split (its files are already "
                f"filtered); reset them to {FiltersConfig().to_dict()}"
            )
        split = protocol(data, **split_config.protocol_params())
        counts = {
            "n_users": int(split.train.shape[0]),
            "n_items": int(split.n_items),
            "n_interactions": int(data.train.n_interactions + data.test.n_interactions),
        }
    else:
        filtered = apply_filters(data, filters)
        split = protocol(filtered, **split_config.protocol_params())
        counts = {
            "n_users": filtered.n_users,
            "n_items": filtered.n_items,
            "n_interactions": filtered.n_interactions,
        }
    return split, {**counts, **split_stats(split)}


# --- cache file: one .npz without pickles; meta (JSON) holds a sha256 of every array ---------


def _split_arrays(split: Split) -> dict[str, np.ndarray]:
    arrays = _csr_arrays("train", split.train)
    for label, eval_set in (("valid", split.valid), ("test", split.test)):
        if eval_set is None:
            continue
        arrays[f"{label}_users"] = eval_set.users
        arrays.update(_csr_arrays(f"{label}_foldin", eval_set.foldin))
        arrays.update(_csr_arrays(f"{label}_targets", eval_set.targets))
        if eval_set.negatives is not None:
            arrays[f"{label}_negatives"] = eval_set.negatives
    for label, ids in (("user_ids", split.user_ids), ("item_ids", split.item_ids)):
        if ids is not None:
            arrays[label] = ids.astype(str) if ids.dtype.kind == "O" else ids
    return arrays


def _csr_arrays(prefix: str, matrix: sp.csr_matrix) -> dict[str, np.ndarray]:
    return {
        f"{prefix}_indptr": matrix.indptr,
        f"{prefix}_indices": matrix.indices,
        f"{prefix}_shape": np.asarray(matrix.shape, dtype=np.int64),
    }


def _binary_csr(arrays: Mapping[str, np.ndarray], prefix: str) -> sp.csr_matrix:
    indices = arrays[f"{prefix}_indices"]
    shape = tuple(int(n) for n in arrays[f"{prefix}_shape"])
    data = np.ones(len(indices), dtype=np.float32)
    return sp.csr_matrix((data, indices, arrays[f"{prefix}_indptr"]), shape=shape)


def _checksum(arrays: Mapping[str, np.ndarray]) -> str:
    digest = hashlib.sha256()
    for key in sorted(arrays):
        array = np.ascontiguousarray(arrays[key])
        digest.update(f"{key}:{array.dtype.str}:{array.shape};".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


def _write_cache(path: Path, prepared: PreparedData) -> None:
    arrays = _split_arrays(prepared.split)
    meta = {
        "cache_version": CACHE_VERSION,
        "name": prepared.name,
        "stats": prepared.stats,
        "strong": prepared.split.strong,
        "checksum": _checksum(arrays),
    }
    with atomic_open(path, "wb", fsync=True) as fh:
        np.savez(fh, meta=np.asarray(json.dumps(meta)), **arrays)


def _read_cache(path: Path, name: str) -> PreparedData:
    """PreparedData from a cache file; ValueError when it fails its checksum or version."""
    with np.load(path, allow_pickle=False) as npz:
        arrays = {key: npz[key] for key in npz.files}
    meta = json.loads(str(arrays.pop("meta")))
    if meta.get("cache_version") != CACHE_VERSION or meta.get("checksum") != _checksum(arrays):
        raise ValueError("checksum or version mismatch")
    eval_sets = {}
    for label in ("valid", "test"):
        if f"{label}_users" in arrays:
            eval_sets[label] = EvalSet(
                arrays[f"{label}_users"],
                _binary_csr(arrays, f"{label}_foldin"),
                _binary_csr(arrays, f"{label}_targets"),
                arrays.get(f"{label}_negatives"),
            )
    if "test" not in eval_sets:
        raise ValueError("no test split in the file")
    split = Split(
        _binary_csr(arrays, "train"),
        eval_sets.get("valid"),
        eval_sets["test"],
        strong=bool(meta["strong"]),
        user_ids=arrays.get("user_ids"),
        item_ids=arrays.get("item_ids"),
    )
    return PreparedData(name, split, meta["stats"])
