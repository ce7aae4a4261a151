"""experiment=loss_ablation: every command its header documents composes to what it says (the
preset's budget and schedule, the swept values, each loss's own settings), and one of them runs
end to end on synthetic data and draws its figure in linrec-report."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from linrec.cli import _job_overrides
from linrec.config import run_config
from tests.conftest import compose_config, run_command

PRESET = Path(__file__).resolve().parents[1] / "conf" / "experiment" / "loss_ablation.yaml"


def documented_commands() -> list[list[str]]:
    """The `linrec -m experiment=loss_ablation …` lines of the preset's header, as arguments
    (without `linrec -m` and the data path)."""
    commands = []
    for line in PRESET.read_text().splitlines():
        text = line.lstrip("#").strip()
        if text.startswith("linrec -m experiment=loss_ablation"):
            commands.append([a for a in shlex.split(text)[2:] if a != "$D"])
    return commands


def test_the_header_documents_the_four_ablations():
    swept = {next(a.split("=")[0] for a in args if "," in a) for args in documented_commands()}
    assert swept == {"model.sampling.n_negatives", "model.sampling.n_positives",
                     "loss.negative_weight", "model.temperature"}


@pytest.mark.parametrize("args", documented_commands(), ids=lambda a: " ".join(a[1:]))
def test_every_documented_command_composes_to_its_settings(args):
    jobs = _job_overrides(args)
    sweep = next(a for a in args if "," in a)
    key, _, values = sweep.partition("=")
    fixed = dict(a.split("=", 1) for a in args if a != sweep)
    seen = []
    for overrides in jobs:
        config = run_config(compose_config(*overrides))
        model = config.model
        assert model.epochs == 20 and model.select_on == "valid"
        assert (model.lr_factor, model.lr_patience, model.stop_patience) == (0.5, 0, 0)
        assert config.data.split.valid_fraction == 0.1 and config.eval.selection == "recall@20"
        assert model.loss.name == fixed["loss"]
        for name, value in fixed.items():  # each loss's own settings, as the header says
            if name.startswith(("loss.", "model.")) and name != "loss":
                owner, field = (model.loss, name[5:]) if name.startswith("loss.") else \
                    (model, name[6:])
                assert _same(_field(owner, field), value), name
        owner, field = (model.loss, key[5:]) if key.startswith("loss.") else (model, key[6:])
        seen.append(_field(owner, field))
    assert seen == [pytest.approx(float(v)) for v in values.split(",")]


def _same(got, written: str) -> bool:
    try:
        return got == pytest.approx(float(written))
    except ValueError:  # a choice such as reduction=sum
        return str(got) == written


def _field(owner, dotted: str):
    for part in dotted.split("."):
        owner = getattr(owner, part)
    return owner


def test_an_ablation_runs_and_draws_its_figure(tmp_path):
    """The first documented command, shrunk to synthetic data, two values and two seeds:
    linrec-report draws each metric against the swept setting."""
    args = documented_commands()[0]
    sweep = next(a for a in args if "," in a)
    small = [a for a in args if a != sweep] + [
        "data=synthetic", "data.variant=null", "data.source.n_users=300",
        "data.source.n_items=100", sweep.split("=")[0] + "=5,10", "model.epochs=2",
        "seed=0,1", "quiet=true"]
    proc = run_command(tmp_path, "-m", *small)
    assert proc.returncode == 0, proc.stderr
    report = run_command(tmp_path, "multirun", "--out", "report", command="linrec-report")
    assert report.returncode == 0, report.stderr
    figures = {p.name for p in (tmp_path / "report" / "figures").iterdir()}
    for metric in ("recall_20", "ndcg_20"):
        assert f"synthetic_{metric}_vs_sampling.n_negatives_test.png" in figures
