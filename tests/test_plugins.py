"""Plugins (linrec.plugins): loaded from a file, a module, $LINREC_PLUGINS and an installed
package's entry point; what they register is selectable on the command line as a built-in (a
model, an MF loss, an estimator, a data source), in a joblib sweep and in linrec-report; a
plugin that fails, clashes or is misspelt is one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from linrec import plugins
from linrec.data.configs import SOURCE_CONFIGS, SPLIT_CONFIGS
from linrec.errors import ConfigError
from linrec.eval.estimators import ESTIMATORS
from linrec.models import MODEL_CONFIGS
from linrec.models.losses import LOSS_CONFIGS
from tests.conftest import run_command

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "plugin"
SMALL = ["data.source.n_users=300", "data.source.n_items=100", "eval.sampled.repeats=2",
         "eval.sampled.sample_sizes=[20]", "eval.sampled.adaptive.estimators=[]"]
REGISTRIES = (MODEL_CONFIGS, LOSS_CONFIGS, ESTIMATORS, SOURCE_CONFIGS, SPLIT_CONFIGS)

MODEL = '''
from dataclasses import dataclass

import numpy as np

from linrec.models import MODEL_CONFIGS, ModelConfig, Recommender
from linrec.params import param


@dataclass
class PopularityShrinkConfig(ModelConfig):
    model_path = "{module}:PopularityShrink"
    name: str = "{name}"
    shrink: float = param(1.0, ge=0, doc="added to every count")


class PopularityShrink(Recommender):
    config_class = PopularityShrinkConfig

    def _fit(self, train, validation):
        counts = np.asarray(train.sum(axis=0)).ravel()
        self.counts_ = counts / (counts + self.config.shrink)

    def _score(self, foldin, users):
        return np.tile(self.counts_, (foldin.shape[0], 1))


MODEL_CONFIGS["{name}"] = PopularityShrinkConfig
'''


@pytest.fixture
def restored_registries():
    """Registries, loaded plugins and imported plugin modules as they were before the test."""
    saved = [(r, dict(r._entries), dict(r._origins)) for r in REGISTRIES]
    loaded, modules, path = dict(plugins._loaded), set(sys.modules), list(sys.path)
    pythonpath = os.environ.get("PYTHONPATH")
    yield
    for registry, entries, origins in saved:
        registry._entries, registry._origins = entries, origins
    plugins._loaded.clear()
    plugins._loaded.update(loaded)
    for name in set(sys.modules) - modules:
        del sys.modules[name]
    sys.path[:] = path
    if pythonpath is None:
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYTHONPATH"] = pythonpath


def _write(directory: Path, module: str, name: str) -> Path:
    path = directory / f"{module}.py"
    path.write_text(MODEL.format(module=module, name=name))
    return path


def test_a_file_plugin_registers_once_and_is_recorded(tmp_path, restored_registries,
                                                      monkeypatch):
    path = _write(tmp_path, "linrec_test_pop", "pop_shrink")
    monkeypatch.delenv(plugins.PLUGINS_ENV, raising=False)
    loaded = plugins.load_plugins([str(path)], entry_points=False)
    assert [p.spec for p in loaded] == [str(path)]
    assert MODEL_CONFIGS.origin("pop_shrink") == f"plugin {str(path)!r}"
    assert plugins.load_plugins([str(path)], entry_points=False) == []  # idempotent
    assert str(tmp_path) in os.environ["PYTHONPATH"].split(os.pathsep)  # for child processes
    from linrec.models import build_model

    assert build_model("pop_shrink", shrink=2.0).config.shrink == 2.0


def test_a_module_in_the_working_directory_and_the_environment_variable(
        tmp_path, restored_registries, monkeypatch):
    _write(tmp_path, "linrec_test_wd", "wd_model")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(plugins.PLUGINS_ENV, " linrec_test_wd , ")
    assert [p.spec for p in plugins.load_plugins(entry_points=False)] == ["linrec_test_wd"]
    assert "wd_model" in MODEL_CONFIGS


@pytest.mark.parametrize("source, match", [
    ("import no_such_module_of_linrec_tests\n",
     r"^plugin '.*broken\.py' failed to load: ModuleNotFoundError: No module named "
     r"'no_such_module_of_linrec_tests'$"),
    ("from linrec.models import MODEL_CONFIGS\nfrom linrec.models.configs import DLAEConfig\n"
     "MODEL_CONFIGS['ease'] = DLAEConfig\n",
     r"^plugin '.*broken\.py' registers model 'ease', which is linrec's built-in "
     r"\(linrec\.models\.configs:EASEConfig\); choose another name"),
])
def test_a_failing_or_clashing_plugin_is_one_line(tmp_path, restored_registries, source, match):
    path = tmp_path / "broken.py"
    path.write_text(source)
    with pytest.raises(plugins.PluginError, match=match) as caught:
        plugins.load_plugins([str(path)], entry_points=False)
    assert "\n" not in str(caught.value)
    assert MODEL_CONFIGS["ease"].__name__ == "EASEConfig"  # nothing was replaced


def test_two_plugins_cannot_register_the_same_name(tmp_path, restored_registries):
    first = _write(tmp_path, "linrec_test_first", "same_name")
    (tmp_path / "second").mkdir()
    second = _write(tmp_path / "second", "linrec_test_second", "same_name")
    plugins.load_plugins([str(first)], entry_points=False)
    with pytest.raises(plugins.PluginError,
                       match=rf"registers model 'same_name', which is already registered by "
                             rf"plugin '{first}'"):
        plugins.load_plugins([str(second)], entry_points=False)
    assert MODEL_CONFIGS["same_name"].__module__ == "linrec_test_first"


def test_user_code_may_replace_an_entry_only_after_deleting_it(restored_registries):
    original = LOSS_CONFIGS["ccl"]
    with pytest.raises(ConfigError, match="user code registers loss 'ccl', which is linrec's"):
        LOSS_CONFIGS["ccl"] = LOSS_CONFIGS["bpr"]
    del LOSS_CONFIGS["ccl"]
    LOSS_CONFIGS["ccl"] = original  # on purpose: allowed
    assert LOSS_CONFIGS.origin("ccl") == "user code"


@pytest.mark.parametrize("overrides, expected", [
    (["model=ease", "plugins=[a,b.c]"], ["a", "b.c"]),
    (["+plugins=/x/y.py"], ["/x/y.py"]),
    (["plugins=[a]", "plugins=[b]"], ["a", "b"]),
    (["model.plugins=1"], []),
])
def test_the_plugins_of_a_command_line(overrides, expected):
    assert plugins.plugins_in_overrides(overrides) == expected


def test_the_nearby_bases_follow_the_dense_item_item_family(tmp_path, restored_registries):
    """A plugin model of the dense item-item family is a base a nearby model accepts."""
    from linrec.models.configs import DENSE_ITEM_ITEM, NearbyHTConfig

    path = _write(tmp_path, "linrec_test_family", "family_model")
    plugins.load_plugins([str(path)], entry_points=False)
    with pytest.raises(ConfigError, match="base='family_model' is not allowed"):
        NearbyHTConfig(base="family_model")
    MODEL_CONFIGS["family_model"].families = frozenset({DENSE_ITEM_ITEM})
    assert NearbyHTConfig(base="family_model").base == "family_model"


# ---------------------------------------------------------------------------------------------
# the commands


PIECES = '''
from dataclasses import dataclass

import numpy as np
import torch

from linrec.data.configs import SOURCE_CONFIGS, SourceConfig
from linrec.data.interactions import Interactions
from linrec.eval.estimators import ESTIMATORS, EstimatorSpec
from linrec.models.losses import LOSS_CONFIGS, LossConfig
from linrec.params import param


@dataclass
class HalfHingeLoss(LossConfig):
    name: str = "half_hinge"
    margin: float = param(0.5, gt=0, doc="the margin")

    def __call__(self, s_pos, s_neg, s_ppos=None, tau_plus=0.0, neg_logq=None,
                 score_floor=float("-inf")):
        return torch.relu(self.margin - s_pos[:, None] + s_neg).mean(1)


def run_top_heavy(run):
    p_hat = np.zeros(run.n_items)
    p_hat[: run.sample_size] = run.histogram / run.histogram.sum()
    return run.result(p_hat)


def load_blocks(n_users=240, n_items=90):
    users = np.repeat(np.arange(n_users), 9)
    items = (users % 30) * 3 + np.tile(np.arange(9), n_users) % n_items
    return Interactions.from_raw(users, items % n_items, name="blocks")


@dataclass
class BlocksSource(SourceConfig):
    loader = "linrec_test_pieces:load_blocks"
    name: str = "blocks"
    n_users: int = param(240, ge=1, doc="users")
    n_items: int = param(90, ge=1, doc="items")


LOSS_CONFIGS["half_hinge"] = HalfHingeLoss
ESTIMATORS["top_heavy"] = EstimatorSpec("top_heavy", run_top_heavy)
SOURCE_CONFIGS["blocks"] = BlocksSource
'''


@pytest.fixture(scope="module")
def plugin_dir(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("plugins")
    _write(directory, "linrec_test_cmd", "pop_shrink")
    (directory / "linrec_test_pieces.py").write_text(textwrap.dedent(PIECES))
    return directory


def test_a_plugin_model_runs_and_a_misspelt_field_names_the_real_one(tmp_path, plugin_dir):
    file = str(plugin_dir / "linrec_test_cmd.py")
    done = run_command(tmp_path, f"plugins=[{file}]", "model=pop_shrink", "model.shrink=3",
                       *SMALL, "hydra.run.dir=run")
    assert done.returncode == 0, done.stderr
    record = json.loads((tmp_path / "run" / "results.json").read_text())
    assert record["model"] == "pop_shrink" and record["config"]["model"]["shrink"] == 3.0
    assert record["config"]["plugins"] == [file]
    assert record["environment"]["plugins"][0]["spec"] == file
    done = run_command(tmp_path, f"plugins=[{file}]", "model=pop_shrink", "model.shrnik=3")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "linrec: error: model 'pop_shrink' has no field 'shrnik' (model.shrnik); allowed: "
        "shrink"]
    done = run_command(tmp_path, f"plugins=[{plugin_dir / 'missing.py'}]")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"linrec: error: plugin '{plugin_dir / 'missing.py'}': no such file: "
        f"{plugin_dir / 'missing.py'}"]


def test_a_plugin_loss_estimator_and_source_from_the_environment(tmp_path, plugin_dir):
    env = {plugins.PLUGINS_ENV: "linrec_test_pieces", "PYTHONPATH": str(plugin_dir)}
    done = run_command(tmp_path, "data/source=blocks", "model=mf", "loss=half_hinge",
                       "loss.margin=0.3", "model.epochs=2", "eval.sampled.repeats=2",
                       "eval.sampled.sample_sizes=[20]", "eval.sampled.adaptive.estimators=[]",
                       "eval.sampled.estimators=[naive,top_heavy]", "hydra.run.dir=run",
                       env=env)
    assert done.returncode == 0, done.stderr
    record = json.loads((tmp_path / "run" / "results.json").read_text())
    assert record["config"]["model"]["loss"] == {"name": "half_hinge", "margin": 0.3}
    assert record["config"]["loss"] is None  # stored once, in the model
    assert record["dataset"]["name"] == "blocks"
    assert len(record["training"]["epochs"]) == 2
    sampled = record["splits"]["test"]["sampled"]
    assert "top_heavy" in json.dumps(sampled)
    done = run_command(tmp_path, "model=mf", "loss=half_hinge", "loss.margn=1", env=env)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "linrec: error: loss has no field 'margn' (loss.margn); allowed: name, margin"]


@pytest.mark.slow
def test_a_plugin_model_in_a_joblib_sweep_and_the_report(tmp_path, plugin_dir):
    """Two joblib workers load the plugin of the command line; the report compares its row
    with the baseline's."""
    file = str(plugin_dir / "linrec_test_cmd.py")
    done = run_command(tmp_path, "-m", f"plugins=[{file}]", "model=pop_shrink,most_popular",
                       *SMALL, "eval.sampled.enabled=false", "hydra/launcher=joblib",
                       "hydra.launcher.n_jobs=2", "hydra.sweep.dir=sweep")
    assert done.returncode == 0, done.stderr
    assert len(list((tmp_path / "sweep").glob("*/results.json"))) == 2
    report = run_command(tmp_path, "sweep", "--baseline", "most_popular", "--out", "report",
                         command="linrec-report")
    assert report.returncode == 0, report.stderr
    text = (tmp_path / "report" / "report_test.md").read_text()
    assert "| pop_shrink |" in text and "difference from most_popular" in text


@pytest.mark.slow
def test_the_example_plugin_installed_as_a_package(tmp_path):
    """examples/plugin installed with pip into a directory on PYTHONPATH: its entry point makes
    `linrec model=cooccurrence`, `loss=squared_hinge` and the estimator `rank_mapping` work
    with no setting at all, in a sweep against EASE and in linrec-report; its own tests (which
    use linrec.testing) pass."""
    target = tmp_path / "target"
    source = tmp_path / "source"
    subprocess.run(["cp", "-r", str(EXAMPLE), str(source)], check=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation",
                    "--quiet", "--target", str(target), str(source)], check=True, timeout=600,
                   capture_output=True)
    env = {"PYTHONPATH": str(target)}
    done = run_command(tmp_path, "model=cooccurrence", "model.shrink=5", *SMALL,
                       "eval.sampled.estimators=[naive,rank_mapping]", "hydra.run.dir=run",
                       env=env)
    assert done.returncode == 0, done.stderr
    record = json.loads((tmp_path / "run" / "results.json").read_text())
    assert record["environment"]["plugins"] == [
        {"plugin": "plugin 'cooc'", "spec": "linrec_cooc", "distribution": "linrec-cooc",
         "version": "0.1.0"}]
    done = run_command(tmp_path, "model=mf", "loss=squared_hinge", "model.epochs=1", *SMALL,
                       "eval.sampled.enabled=false", "hydra.run.dir=mf", env=env)
    assert done.returncode == 0, done.stderr
    done = run_command(tmp_path, "-m", "model=cooccurrence,ease", *SMALL,
                       "eval.sampled.enabled=false", "hydra.sweep.dir=sweep", env=env)
    assert done.returncode == 0, done.stderr
    report = run_command(tmp_path, "sweep", "--baseline", "ease", "--out", "report",
                         command="linrec-report", env=env)
    assert report.returncode == 0, report.stderr
    assert "| cooccurrence |" in (tmp_path / "report" / "report_test.md").read_text()
    tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                            str(source / "tests")], cwd=tmp_path, capture_output=True, text=True,
                           env={**os.environ, "PYTHONPATH": str(target)}, timeout=600)
    assert tests.returncode == 0, tests.stdout + tests.stderr


@pytest.mark.slow
def test_plugins_in_the_studies_the_optuna_sweeper_and_submitits_jobs(tmp_path, plugin_dir):
    """A plugin model is a family of the linear-models study and a plugin loss a row of the loss
    study; the Optuna sweeper's trials and submitit's job processes load the command's
    plugins."""
    model_file = str(plugin_dir / "linrec_test_cmd.py")
    pieces = str(plugin_dir / "linrec_test_pieces.py")
    done = run_command(
        tmp_path, f"plugins=[{model_file}]", "experiment=linear_models", "data=synthetic",
        "data.source.n_users=300", "data.source.n_items=100", "data.split.n_valid_users=40",
        "data.split.n_test_users=40", "quiet=true", "~study.models",
        "+study.models={pop: {model: pop_shrink, grid: {shrink: [1.0, 4.0]}}, "
        "ease: {model: ease, grid: {lam: [50.0]}}}", "hydra.run.dir=linear")
    assert done.returncode == 0, done.stderr
    assert len(list((tmp_path / "linear" / "runs" / "pop").glob("*/results.json"))) == 2
    dataset = ("{source: {name: synthetic, n_users: 200, n_items: 80}, "
               "split: {kind: holdout, valid_fraction: 0.15}}")
    done = run_command(
        tmp_path, f"plugins=[{pieces}]", "experiment=loss_study", "quiet=true",
        "model.epochs=1", "model.sampling.n_negatives=8", "model.sampling.n_positives=2",
        "~study.datasets", f"+study.datasets={{small: {dataset}}}", "~study.models",
        "+study.models={ccl: {loss: {name: ccl}}, half: {loss: {name: half_hinge}}}",
        "~study.rows", "+study.rows=[{name: Hinge, loss: half, against: ccl}]",
        "~study.per_dataset", "hydra.run.dir=losses")
    assert done.returncode == 0, done.stderr
    record = json.loads((tmp_path / "losses" / "runs" / "small" / "half" / "results.json")
                        .read_text())
    assert record["config"]["model"]["loss"]["name"] == "half_hinge"
    for launcher in (["hydra/sweeper=optuna", "hydra.sweeper.n_trials=2",
                      "model.shrink=interval(0.1,5)"],
                     ["hydra/launcher=submitit_local", "model.shrink=1,5"]):
        sweep = tmp_path / launcher[0].split("=")[1]
        done = run_command(tmp_path, "-m", f"plugins=[{model_file}]", "model=pop_shrink",
                           *SMALL, "eval.sampled.enabled=false", *launcher,
                           f"hydra.sweep.dir={sweep}")
        assert done.returncode == 0, done.stderr
        assert len(list(sweep.glob("*/results.json"))) == 2, launcher
