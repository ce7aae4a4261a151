"""The configuration reference, generated from the typed configs and the YAML presets.

Every field of every config group (its type, default, allowed values or range and description)
is read from the dataclasses (`linrec.params.param` metadata), and every preset of a group
from the first comment paragraph of its YAML file, so the reference cannot drift from the code.
The documentation build writes `config_reference_markdown()` and the results.json schema into
its reference pages (docs/conf.py); `undocumented_fields()` is what the tests hold at zero.
`python -m linrec.reference` prints the configuration reference with the installed plugins (and
those of $LINREC_PLUGINS) loaded, each entry a plugin registered saying so.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from linrec.params import Params, _bounds_text, field_choices
from linrec.registry import Registry

#: what a field of these names means wherever it appears (the selectors of a config class)
_SELECTOR_DOCS = {
    "name": "the name that selects this config (set by the group choice)",
    "kind": "the split protocol (set by the `data/split=` choice)",
}


@dataclasses.dataclass(frozen=True)
class FieldRow:
    """One row of the reference: dotted field path, type, default, allowed values, meaning."""

    path: str
    type: str
    default: str
    allowed: str
    doc: str


def _type_text(annotation: Any) -> str:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is Any:
        return "any"
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_text(a) for a in args)
    if annotation is type(None):
        return "null"
    if origin in (tuple, list):
        return f"list of {_type_text(args[0])}" if args else "list"
    if origin is dict or annotation is dict:
        return "mapping"
    if isinstance(annotation, type):
        return {"str": "string", "int": "integer", "float": "number",
                "bool": "boolean"}.get(annotation.__name__, annotation.__name__)
    return str(annotation)


def _default_text(field: dataclasses.Field) -> str:
    if field.default is not dataclasses.MISSING:
        value = field.default
    elif field.default_factory is not dataclasses.MISSING:
        value = field.default_factory()
    else:
        return "required"
    if isinstance(value, Params):
        return "see below"
    if isinstance(value, tuple):
        value = list(value)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value in (float("inf"), float("-inf")):
        return "-inf" if value < 0 else "inf"
    return f"{value!r}" if isinstance(value, str) else f"{value}"


def _allowed_text(metadata: Mapping[str, Any]) -> str:
    choices = field_choices(metadata)
    if choices is not None:
        return ", ".join(str(c) for c in choices)
    return _bounds_text(**{k: metadata.get(k) for k in ("ge", "gt", "le", "lt")}).strip()


def field_doc(field: dataclasses.Field) -> str:
    """The description of a field: its `doc`, or the shared one of a selector name."""
    return field.metadata.get("doc") or _SELECTOR_DOCS.get(field.name, "")


def field_rows(cls: type, prefix: str = "", skip: tuple[str, ...] = ()) -> Iterator[FieldRow]:
    """The rows of a config class, nested configs expanded under their dotted path."""
    hints = typing.get_type_hints(cls)
    for field in dataclasses.fields(cls):
        if field.name in skip:
            continue
        path = f"{prefix}{field.name}"
        annotation = hints[field.name]
        if isinstance(annotation, type) and issubclass(annotation, Params):
            yield from field_rows(annotation, f"{path}.")
            continue
        yield FieldRow(path, _type_text(annotation), _default_text(field),
                       _allowed_text(field.metadata), field_doc(field))


def _cell(text: str) -> str:
    return text.replace("|", "&#124;").replace("\n", " ")


def _table(rows: list[FieldRow]) -> list[str]:
    if not rows:
        return ["No parameters.", ""]
    lines = ["| field | type | default | allowed | meaning |", "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| `{r.path}` | {_cell(r.type)} | `{_cell(r.default)}` | "
                     f"{_cell(r.allowed) or '—'} | {_cell(r.doc)} |")
    return [*lines, ""]


def _summary(cls: type) -> str:
    """The first paragraph of a config class's own docstring ('' for a bare dataclass)."""
    doc = cls.__dict__.get("__doc__") or ""
    if doc.startswith(f"{cls.__name__}("):  # dataclass's generated signature
        return ""
    return " ".join(doc.strip().split("\n\n")[0].split())


def preset_notes(group: str, conf_dir: Path | None = None) -> dict[str, str]:
    """{preset name: the first paragraph of its YAML header comment} for a config group
    (`model`, `data`, `data/split`, `experiment`, ...)."""
    from linrec.cli import config_dir

    folder = Path(conf_dir or config_dir()) / group
    notes = {}
    for path in sorted(folder.glob("*.yaml")):
        paragraph: list[str] = []
        for line in path.read_text().splitlines():
            if not line.startswith("#"):
                break
            text = line.lstrip("#").strip()
            if text.startswith("@package"):
                continue
            if not text:
                if paragraph:
                    break
                continue
            paragraph.append(text)
        notes[path.stem] = " ".join(paragraph)
    return notes


def _registry_sections(title: str, selector: str, configs: Mapping[str, type],
                       skip: tuple[str, ...] = (), notes: Mapping[str, str] | None = None,
                       prefix: str = "") -> list[str]:
    from linrec.registry import BUILT_IN

    lines = [f"## {title}", ""]
    for name, cls in configs.items():
        lines += [f"### `{selector}={name}`", ""]
        origin = configs.origin(name) if isinstance(configs, Registry) else BUILT_IN
        if origin != BUILT_IN:
            lines += [f"Registered by {origin}.", ""]
        summary = _summary(cls) or (notes or {}).get(name, "")
        if summary:
            lines += [summary, ""]
        lines += _table(list(field_rows(cls, prefix, skip=skip)))
    return lines


def _preset_list(title: str, group: str, selector: str) -> list[str]:
    lines = [f"## {title}", "", "| preset | what it sets |", "|---|---|"]
    for name, note in preset_notes(group).items():
        lines.append(f"| `{selector}={name}` | {_cell(note) or '—'} |")
    return [*lines, ""]


def config_reference_markdown() -> str:
    """The whole configuration reference as one Markdown page."""
    from linrec.config import RunConfig
    from linrec.data.configs import SOURCE_CONFIGS, SPLIT_CONFIGS, DataConfig
    from linrec.eval.configs import EvalConfig
    from linrec.models.configs import MODEL_CONFIGS
    from linrec.models.losses import LOSS_CONFIGS
    from linrec.study_configs import STUDY_CONFIGS
    from linrec.tracking import TrackingConfig

    model_notes = preset_notes("model")
    lines = [
        "# Configuration reference", "",
        "Generated from linrec's typed configs and the presets in `conf/` when the "
        "documentation is built. Set a field with `key=value` on the command line "
        "(`model.lam=300`), choose an option of a group with `group=name` (`model=lrr`), and "
        "print a run's whole resolved config with `linrec --cfg job --resolve`. A value outside "
        "the allowed range, or a field a config does not have, stops the run before anything "
        "is computed, with a message naming the field.", "",
        "## The run (top level)", "",
        *_table(list(field_rows(RunConfig, skip=("data", "model", "eval", "study", "loss",
                                                 "tracking")))),
        "## Data (`data.*`)", "",
        "`data=<preset>` chooses a source and its split; the fields below apply to every "
        "source.", "",
        *_table(list(field_rows(DataConfig, "data.", skip=("source", "split")))),
        *_preset_list("Data presets", "data", "data"),
        *_registry_sections("Data sources (`data.source.*`)", "data.source.name", SOURCE_CONFIGS,
                            prefix="data.source."),
        *_registry_sections("Splits (`data.split.*`)", "data/split", SPLIT_CONFIGS,
                            prefix="data.split."),
        *_registry_sections("Models (`model.*`)", "model", MODEL_CONFIGS, notes=model_notes,
                            prefix="model."),
        *_registry_sections("Losses (`model.loss.*`, chosen by `loss=`)", "loss", LOSS_CONFIGS,
                            notes=preset_notes("loss"), prefix="model.loss."),
        *_preset_list("Negative samplers (`sampler=`)", "sampler", "sampler"),
        *_preset_list("Priors of the debiased losses (`prior=`)", "prior", "prior"),
        "## Evaluation (`eval.*`)", "",
        _summary(EvalConfig), "",
        *_table(list(field_rows(EvalConfig, "eval."))),
        *_registry_sections("Studies (`study.*`, chosen by an `experiment=` preset)", "study",
                            STUDY_CONFIGS, prefix="study."),
        *_preset_list("Experiment presets", "experiment", "experiment"),
        "## Tracking (`tracking.*`, chosen by `+tracking=mlflow`)", "",
        _summary(TrackingConfig), "",
        *_table(list(field_rows(TrackingConfig, "tracking."))),
    ]
    return "\n".join(lines).rstrip() + "\n"


def undocumented_fields() -> list[str]:
    """'<config class>.<field>' of every field the reference would show without a meaning."""
    from linrec.config import RunConfig
    from linrec.data.configs import SOURCE_CONFIGS, SPLIT_CONFIGS
    from linrec.models.configs import MODEL_CONFIGS
    from linrec.models.losses import LOSS_CONFIGS
    from linrec.study_configs import STUDY_CONFIGS
    from linrec.tracking import TrackingConfig

    missing: list[str] = []
    seen: set[type] = set()

    def walk(cls: type) -> None:
        if cls in seen:
            return
        seen.add(cls)
        hints = typing.get_type_hints(cls)
        for field in dataclasses.fields(cls):
            annotation = hints[field.name]
            if isinstance(annotation, type) and issubclass(annotation, Params):
                walk(annotation)
            elif not field_doc(field):
                missing.append(f"{cls.__name__}.{field.name}")

    walk(RunConfig)
    walk(TrackingConfig)
    for registry in (MODEL_CONFIGS, LOSS_CONFIGS, SOURCE_CONFIGS, SPLIT_CONFIGS, STUDY_CONFIGS):
        for cls in registry.values():
            walk(cls)
    return missing


#: the packages whose `__all__` is the public Python API
API_PACKAGES = ("linrec.data", "linrec.models", "linrec.eval", "linrec.eval.estimators")


def _doc_block(obj: Any) -> list[str]:
    import inspect

    doc = inspect.getdoc(obj)
    return ["```text", doc, "```", ""] if doc else []


def _signature(obj: Any) -> str:
    import inspect

    try:
        return str(inspect.signature(obj))
    except (TypeError, ValueError):
        return ""


def _public_methods(cls: type) -> Iterator[tuple[str, Any]]:
    for name, member in vars(cls).items():
        if name.startswith("_") and name != "__call__":
            continue
        function = getattr(member, "__func__", member)
        if callable(function) and getattr(function, "__doc__", None):
            yield name, function


def api_reference_markdown() -> str:
    """The public Python API (the `__all__` of `API_PACKAGES`, and every model class) as one
    Markdown page: signatures and docstrings."""
    import importlib
    import inspect

    from linrec.models.registry import MODELS, model_class

    lines = ["# Python API", "",
             "Generated from the docstrings when the documentation is built: every name the "
             "packages below export (their `__all__`), then every model class. Shapes are "
             "written (n_users, n_items); matrices are SciPy CSR unless a docstring says "
             "otherwise.", ""]
    for package in API_PACKAGES:
        module = importlib.import_module(package)
        lines += [f"## `{package}`", "", *_doc_block(module)]
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.isclass(obj) or inspect.isfunction(obj):
                kind = "class" if inspect.isclass(obj) else "function"
                lines += [f"### `{package}.{name}`", "",
                          f"{kind} `{name}{_signature(obj)}`", "", *_doc_block(obj)]
                if inspect.isclass(obj):
                    for method, function in _public_methods(obj):
                        lines += [f"#### `{name}.{method}`", "",
                                  f"`{method}{_signature(function)}`", "",
                                  *_doc_block(function)]
            else:
                lines += [f"### `{package}.{name}`", "", f"constant: `{_short(obj)}`", ""]
    lines += ["## Model classes", "",
              "Each model is `Class(config)` or `Class(**fields)`; `from linrec.models import "
              "EASE` imports one. Fields: the configuration reference.", ""]
    for name in MODELS:
        cls = model_class(name)
        lines += [f"### `{cls.__name__}` (`model={name}`)", "", *_doc_block(cls)]
    return "\n".join(lines).rstrip() + "\n"


def _short(value: Any) -> str:
    text = repr(value) if not isinstance(value, Mapping) else f"mapping of {len(value)} names"
    return text if len(text) <= 80 else text[:77] + "..."


def command_help_markdown() -> str:
    """The `--help` text of linrec-report, linrec-recommend and linrec-evaluate, as their parsers
    print it."""
    import contextlib
    import io
    import os

    from linrec.cli import evaluate_main, recommend_main, report_main

    lines: list[str] = []
    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"  # argparse wraps to the terminal; the page wraps at 100
    try:
        for name, main in (("linrec-report", report_main), ("linrec-recommend", recommend_main),
                           ("linrec-evaluate", evaluate_main)):
            out = io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
                main(["--help"])
            lines += [f"### `{name}`", "", "```text", out.getvalue().rstrip(), "```", ""]
    finally:
        if previous is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = previous
    return "\n".join(lines)


def main() -> None:
    """`python -m linrec.reference`: the configuration reference, plugins included."""
    import sys

    from linrec.plugins import PluginError, load_plugins

    try:
        load_plugins(sys.argv[1:])
    except PluginError as exc:
        sys.exit(f"linrec.reference: error: {exc}")
    print(config_reference_markdown(), end="")


if __name__ == "__main__":
    main()
