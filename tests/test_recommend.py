"""`linrec-recommend`: top-K lists of a finished run, consistent with its ranks.npz."""

from __future__ import annotations

import json

import numpy as np
import pytest

from linrec.cli import recommend_main
from tests.conftest import run_command

SMALL = ["data.source.n_users=400", "data.source.n_items=150"]


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("recommend")
    proc = run_command(tmp, f"hydra.run.dir={tmp / 'run'}", *SMALL,
                       "eval.sampled.enabled=false", "figures=false", "save_model=true",
                       "model.lam=50")
    assert proc.returncode == 0, proc.stderr
    return tmp


def _read_tsv(path):
    lines = path.read_text().splitlines()
    assert lines[0] == "user\trank\titem\tscore"
    return [line.split("\t") for line in lines[1:]]


def test_lists_agree_with_the_evaluators_ranks(saved_run, monkeypatch, capsys):
    from linrec.config import run_config
    from linrec.data.pipeline import prepare_data

    monkeypatch.setenv("LINREC_DATA", str(saved_run / "cache"))
    run_dir = saved_run / "run"
    assert recommend_main([str(run_dir), "-k", "10"]) == 0
    assert "top-10 lists" in capsys.readouterr().out
    rows = _read_tsv(run_dir / "recommendations_test.tsv")
    config = run_config(json.loads((run_dir / "results.json").read_text())["config"])
    split = prepare_data(config.data).split
    test = split.test
    users = [str(u) for u in (test.users if split.user_ids is None
                              else np.asarray(split.user_ids)[test.users])]
    item_index = {str(v): j for j, v in enumerate(split.item_ids if split.item_ids is not None
                                                  else range(test.foldin.shape[1]))}
    listed: dict[str, list[int]] = {}
    for user, rank, item, score in rows:
        listed.setdefault(user, []).append(item_index[item])
        assert int(rank) == len(listed[user]) and np.isfinite(float(score))
    assert sorted(listed) == sorted(users) and all(len(v) == 10 for v in listed.values())
    ranks = np.load(run_dir / "ranks.npz")
    position = {(users[row], item): p for row in range(len(users))
                for p, item in enumerate(listed[users[row]], 1)}
    checked = 0
    for row, item, rank in zip(ranks["row"], ranks["item"], ranks["rank"], strict=True):
        key = (users[row], int(item))
        if key in position:  # a listed held-out item: other held-out items may precede it
            assert rank <= position[key]
            checked += 1
        else:
            assert rank > 10 - (test.targets[row].nnz - 1)
        foldin = set(test.foldin[row].indices)
        assert not foldin & set(listed[users[row]])
    assert checked > 0


def test_train_users_and_an_explicit_output(saved_run, monkeypatch, tmp_path):
    monkeypatch.setenv("LINREC_DATA", str(saved_run / "cache"))
    out = tmp_path / "lists.tsv"
    assert recommend_main([str(saved_run / "run"), "-k", "3", "--split", "train",
                           "--out", str(out)]) == 0
    rows = _read_tsv(out)
    assert len(rows) == 3 * len({r[0] for r in rows}) and len(rows) > 3


def test_errors_name_the_run_and_the_fix(saved_run, tmp_path, capsys):
    assert recommend_main([str(tmp_path), "-k", "3"]) == 2
    assert "no results.json; not a finished linrec run" in capsys.readouterr().err
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "results.json").write_text((saved_run / "run" / "results.json").read_text())
    assert recommend_main([str(bare)]) == 2
    assert "no model.pkl; run it again with save_model=true" in capsys.readouterr().err
    assert not list(bare.glob("recommendations*"))
