"""prepare_data(cfg): source -> filters -> split protocol, cached under $LINREC_DATA/splits/.

The `data` config group (a plain mapping or an OmegaConf DictConfig):

    name: synthetic                       # label of the prepared data
    source: {name: synthetic, ...}        # linrec.data.sources.load_source(name, **params)
    filters: {min_rating: null, min_user_interactions: 0, min_item_interactions: 0,
              iterative: true}
    split: {kind: holdout|loo|strong|predefined, seed: 12345, <protocol params>}
    cache: true

`split` keys other than `kind` are the keyword arguments of the protocol function
(`SPLIT_PROTOCOLS[kind]`); an unknown kind or parameter raises ConfigError.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import os
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from linrec.atomic import atomic_open
from linrec.data.filters import FILTER_DEFAULTS, apply_filters, resolve_filter_config
from linrec.data.interactions import Interactions, PredefinedSplitData
from linrec.data.splits import (
    EvalSet,
    Split,
    holdout,
    leave_one_out,
    predefined,
    strong_generalization,
)
from linrec.errors import ConfigError

log = logging.getLogger(__name__)

#: split.kind -> protocol function; its keyword arguments are the allowed split.* parameters
SPLIT_PROTOCOLS: dict[str, Callable[..., Split]] = {
    "holdout": holdout,
    "loo": leave_one_out,
    "strong": strong_generalization,
    "predefined": predefined,
}
DATA_KEYS = ("name", "source", "filters", "split", "cache")
#: short keys a data group's yaml may offer and interpolate into `source` (`data.path=...` for
#: `data.source.path=...`); the pipeline reads them only through `source`
SHORTCUT_KEYS = ("path", "variant", "download", "user_col", "item_col", "rating_col",
                 "timestamp_col", "sep")
#: bump when the cache layout or a protocol's output changes: old cache files are then ignored
CACHE_VERSION = 1


@dataclass(frozen=True)
class PreparedData:
    """A split ready for fitting and evaluation.

    stats: n_users, n_items, n_interactions of the filtered data; split_n_items,
    n_train_interactions; for each present EvalSet <label>_users, <label>_targets,
    <label>_foldin (label = valid / test)."""

    name: str
    split: Split
    stats: dict[str, Any]


def prepare_data(cfg: Mapping[str, Any]) -> PreparedData:
    """Load, filter and split the data of the `data` config group (see module docstring).

    With cache: true (default) the result is read from / written to
    `cache_path(cfg)`; an unreadable or corrupt cache file is rebuilt."""
    if not isinstance(cfg, Mapping):
        raise ConfigError(f"data must be a mapping with keys {list(DATA_KEYS)}, got {cfg!r}")
    config = {k: v for k, v in _plain(cfg).items() if k not in SHORTCUT_KEYS}
    unknown = sorted(set(config) - set(DATA_KEYS))
    if unknown:
        raise ConfigError(f"unknown data key(s) {unknown}; allowed: {list(DATA_KEYS)}")
    protocol, split_params = _resolve_split(config.get("split"))
    resolve_filter_config(config.get("filters"))  # fail before loading anything
    source_cfg = config.get("source")
    if not isinstance(source_cfg, dict) or not source_cfg.get("name"):
        raise ConfigError(f"data.source must be a mapping with a 'name', got {source_cfg!r}")
    name = str(config.get("name") or source_cfg["name"])
    use_cache = config.get("cache", True)
    if not isinstance(use_cache, bool):
        raise ConfigError(f"data.cache must be true or false, got {use_cache!r}")

    path = cache_path(config)
    if use_cache and path.exists():
        try:
            return _read_cache(path, name)
        except (OSError, ValueError, KeyError, zipfile.BadZipFile) as err:
            log.warning("split cache %s is unreadable (%s); rebuilding it", path, err)

    source_params = {k: v for k, v in source_cfg.items() if k != "name"}
    from linrec.data import sources  # late import: the readers are heavy and optional

    data = sources.load_source(source_cfg["name"], **source_params)
    split, stats = _build_split(data, config.get("filters"), protocol, split_params)
    prepared = PreparedData(name, split, stats)
    if use_cache:
        _write_cache(path, prepared)
    log.info("prepared %s: %s", name, stats)
    return prepared


def cache_path(cfg: Mapping[str, Any]) -> Path:
    """$LINREC_DATA/splits/<first 16 hex of sha256(canonical JSON of cfg without 'cache')>.npz
    ($LINREC_DATA defaults to ~/.cache/linrec)."""
    config = {k: v for k, v in _plain(cfg).items() if k not in ("cache", *SHORTCUT_KEYS)}
    source_path = (config.get("source") or {}).get("path")
    try:
        canonical = json.dumps({"cache_version": CACHE_VERSION, "data": config,
                                "files": _file_fingerprint(source_path)},
                               sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"data config is not plain JSON data ({err})") from err
    digest = hashlib.sha256(canonical.encode()).hexdigest()[:16]
    root = Path(os.environ.get("LINREC_DATA") or Path.home() / ".cache" / "linrec").expanduser()
    return root / "splits" / f"{digest}.npz"


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


# ---------------------------------------------------------------------------------------------


def _resolve_split(split_cfg: Any) -> tuple[Callable[..., Split], dict[str, Any]]:
    """(protocol function, its keyword arguments) from the `split` config; ConfigError when the
    kind or a parameter is unknown."""
    if not isinstance(split_cfg, dict) or "kind" not in split_cfg:
        raise ConfigError(
            f"data.split must be a mapping with a 'kind' in {sorted(SPLIT_PROTOCOLS)}, "
            f"got {split_cfg!r}"
        )
    params = dict(split_cfg)
    kind = params.pop("kind")
    if kind not in SPLIT_PROTOCOLS:
        raise ConfigError(f"unknown data.split.kind {kind!r}; allowed: {sorted(SPLIT_PROTOCOLS)}")
    protocol = SPLIT_PROTOCOLS[kind]
    allowed = list(inspect.signature(protocol).parameters)[1:]
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise ConfigError(
            f"unknown data.split parameter(s) {unknown} for kind {kind!r}; allowed: {allowed}"
        )
    seed = params.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ConfigError(f"data.split.seed must be an integer >= 0, got {seed!r}")
    return protocol, params


def _build_split(
    data: Interactions | PredefinedSplitData,
    filters_cfg: Mapping[str, Any] | None,
    protocol: Callable[..., Split],
    split_params: dict[str, Any],
) -> tuple[Split, dict[str, Any]]:
    is_predefined = protocol is predefined
    if isinstance(data, PredefinedSplitData) and not is_predefined:
        raise ConfigError(
            f"source {data.name!r} gives a published train/test split; set data.split.kind: "
            "predefined"
        )
    if not isinstance(data, PredefinedSplitData) and is_predefined:
        raise ConfigError(
            "data.split.kind: predefined needs a source with published train/test files "
            f"(lightgcn, ncf); source {data.name!r} gave plain interactions"
        )
    if is_predefined:
        if resolve_filter_config(filters_cfg) != FILTER_DEFAULTS:
            raise ConfigError(
                "data.filters are not applied to a predefined split (its files are already "
                f"filtered); reset them to {FILTER_DEFAULTS}"
            )
        split = protocol(data, **split_params)
        counts = {
            "n_users": int(split.train.shape[0]),
            "n_items": int(split.n_items),
            "n_interactions": int(data.train.n_interactions + data.test.n_interactions),
        }
    else:
        filtered = apply_filters(data, filters_cfg)
        split = protocol(filtered, **split_params)
        counts = {
            "n_users": filtered.n_users,
            "n_items": filtered.n_items,
            "n_interactions": filtered.n_interactions,
        }
    return split, {**counts, **split_stats(split)}


def _plain(value: Any) -> Any:
    """Mappings -> dicts with str keys, sequences -> lists, numpy scalars -> Python scalars
    (an OmegaConf DictConfig is a Mapping)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


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
    log.info("read split %s from cache %s", name, path)
    return PreparedData(meta["name"], split, meta["stats"])
