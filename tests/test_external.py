"""linrec-evaluate (linrec.external): a ranking written by another library (implicit's ALS,
here) scored by linrec's evaluation; its exact metrics equal ranx's on the same lists (with the
fold-in items removed, as linrec masks them) at 1e-12; lists cut short leave out the deeper
cut-offs, AUC and the sampled block; bad run files are one line naming file, line and value;
the run sits beside linrec's own in linrec-report."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import implicit
import pytest
import ranx
from threadpoolctl import threadpool_limits

from linrec.config import RunConfig
from linrec.data.pipeline import prepare_data
from linrec.errors import DataError
from linrec.external import evaluate_run_file, read_run_file
from tests.conftest import run_command

DATA = {"source": {"name": "synthetic", "n_users": 300, "n_items": 100}, "cache": False}
DATA_OVERRIDES = ["data.source.n_users=300", "data.source.n_items=100"]
EVAL = {"splits": ["test"], "ks": [1, 5, 10, 20, 50], "sampled": {
    "sample_sizes": [20], "repeats": 2, "adaptive": {"n0": 20, "n_max": 80}}}
#: linrec's metric names and ranx's for the same definitions (recall: hits / |T|; ndcg: binary
#: gains, IDCG over min(K, |T|); hr: at least one hit; mrr: 1 / rank of the first hit)
RANX_NAMES = {"recall": "recall", "ndcg": "ndcg", "precision": "precision", "hr": "hit_rate",
              "mrr": "mrr"}


@pytest.fixture(scope="module")
def split():
    return prepare_data(DATA).split


def _als_lists(split, depth: int, filtered: bool):
    """implicit's ALS fitted on the training rows: (user ids, item ids, scores) of each test
    user's top `depth` items (`filtered`: the user's fold-in items left out by implicit)."""
    with threadpool_limits(1, "blas"):  # implicit's advice: one BLAS thread beside its own
        model = implicit.cpu.als.AlternatingLeastSquares(factors=8, iterations=3,
                                                         random_state=0)
        model.fit(split.train.tocsr(), show_progress=False)
    test = split.test
    items, scores = model.recommend(test.users, test.foldin.tocsr(), N=depth,
                                    filter_already_liked_items=filtered)
    return [(split.user_ids[u], split.item_ids[row], s)
            for u, row, s in zip(test.users, items, scores, strict=True)]


def _write_trec(path: Path, lists) -> Path:
    with open(path, "w") as handle:
        for user, items, scores in lists:
            for rank, (item, score) in enumerate(zip(items, scores, strict=True), start=1):
                handle.write(f"{user} Q0 {item} {rank} {float(score)!r} als\n")
    return path


def _ranx(split, lists, ks, metrics):
    """ranx's means over the test users of `metrics` at `ks`, the fold-in items removed from
    the lists as linrec masks them."""
    test = split.test
    position = {u: row for row, u in enumerate(test.users)}
    qrels, run = {}, {}
    for user, items, scores in lists:
        row = position[int(user)]
        foldin = set(test.foldin.indices[test.foldin.indptr[row]:test.foldin.indptr[row + 1]])
        targets = test.targets.indices[test.targets.indptr[row]:test.targets.indptr[row + 1]]
        qrels[str(user)] = {str(i): 1 for i in targets}
        kept = {str(i): float(s) for i, s in zip(items, scores, strict=True) if i not in foldin}
        assert len(set(kept.values())) == len(kept), "tied scores: the order would be ambiguous"
        run[str(user)] = kept
    names = [f"{RANX_NAMES[m]}@{k}" for m in metrics for k in ks]
    with warnings.catch_warnings():  # ranx's own numba cast notice, nothing of linrec's
        warnings.simplefilter("ignore")
        values = ranx.evaluate(ranx.Qrels(qrels), ranx.Run(run), names,
                               make_comparable=True)
    return {f"{m}@{k}": values[f"{RANX_NAMES[m]}@{k}"] for m in metrics for k in ks}


def _config(**eval_overrides):
    return RunConfig.from_mapping({"data": DATA, "model": {"name": "most_popular"},
                                   "eval": {**EVAL, **eval_overrides}, "figures": False})


def test_whole_catalogue_lists_give_ranx_metrics_auc_and_the_sampled_block(split, tmp_path):
    lists = _als_lists(split, split.n_items, filtered=False)
    path = _write_trec(tmp_path / "als.trec", lists)
    record = evaluate_run_file(path, _config(), tmp_path / "run", label="als")
    exact = record["splits"]["test"]["exact"]
    expected = _ranx(split, lists, EVAL["ks"], list(RANX_NAMES))
    for key, value in expected.items():
        assert exact[key] == pytest.approx(value, abs=1e-12, rel=1e-12), key
    assert 0.5 < exact["auc"] < 1.0
    sampled = record["splits"]["test"]["sampled"]
    assert set(sampled) == {"n=20", "adaptive"}
    assert "notes" not in record and record["model"] == "als"
    assert record["config"]["model"]["format"] == "trec"


def test_lists_cut_short_keep_only_the_cut_offs_within_them(split, tmp_path):
    lists = _als_lists(split, 10, filtered=True)
    path = _write_trec(tmp_path / "top10.trec", lists)
    record = evaluate_run_file(path, _config(), tmp_path / "run", label="top10")
    exact = record["splits"]["test"]["exact"]
    assert sorted({int(k.split("@")[1]) for k in exact if "@" in k}) == [1, 5, 10]
    assert "auc" not in exact and not record["splits"]["test"].get("sampled")
    assert record["notes"] == ["the lists are cut at 10 items for some user: metrics at K <= 10 "
                               "only (K = 1, 5, 10); the selection metric is ndcg@10; no AUC "
                               "and no sampled block, which need the whole catalogue ranked"]
    expected = _ranx(split, lists, [1, 5, 10], list(RANX_NAMES))
    for key, value in expected.items():
        assert exact[key] == pytest.approx(value, abs=1e-12, rel=1e-12), key


@pytest.mark.parametrize("text, match", [
    ("0 Q0 3 1 0.5 x\n0 Q0 nine 2 0.4 x\n", r"line 2: item 'nine' is not in the data's items"),
    ("0 Q0 3 1 0.5 x\n0 Q0 3 2 0.4 x\n", r"line 2: user '0' lists item '3' a second time"),
    ("0 Q0 3 1 0.5\n", r"line 1: '0 Q0 3 1 0.5' has 5 fields; a TREC run line has 6"),
    ("0 Q0 3 1 high x\n", r"line 1: score 'high' is not a number"),
    ("0 Q0 3 1 nan x\n", r"line 1: score 'nan' is not a finite number"),
])
def test_a_bad_run_file_is_named_with_its_line(split, tmp_path, text, match):
    path = tmp_path / "bad.trec"
    path.write_text(text)
    with pytest.raises(DataError, match=match):
        read_run_file(path, "auto", split.user_ids, split.item_ids)


def test_a_user_without_a_list_is_refused(split, tmp_path):
    lists = _als_lists(split, 10, filtered=True)[1:]
    path = _write_trec(tmp_path / "partial.trec", lists)
    with pytest.raises(DataError, match=r"no list for 1 user\(s\) of the test split"):
        evaluate_run_file(path, _config(), tmp_path / "run")


def test_the_command_reads_csv_and_the_report_sets_it_beside_a_linrec_run(split, tmp_path):
    lists = _als_lists(split, split.n_items, filtered=False)
    rows = ["user,item,score"] + [f"{u},{i},{float(s)!r}" for u, items, scores in lists
                                  for i, s in zip(items, scores, strict=True)]
    (tmp_path / "als.csv").write_text("\n".join(rows) + "\n")
    sampled = ["eval.sampled.sample_sizes=[20]", "eval.sampled.repeats=2",
               "eval.sampled.adaptive.n0=20", "eval.sampled.adaptive.n_max=80"]
    done = run_command(tmp_path, "als.csv", "--out", "runs/als", *DATA_OVERRIDES, *sampled,
                       command="linrec-evaluate")
    assert done.returncode == 0, done.stderr
    assert "results: runs/als/results.json" in done.stdout
    record = json.loads((tmp_path / "runs" / "als" / "results.json").read_text())
    assert record["config"]["model"]["format"] == "csv"
    done = run_command(tmp_path, *DATA_OVERRIDES, *sampled, "model=most_popular",
                       "eval.splits=[test]", "hydra.run.dir=runs/most_popular")
    assert done.returncode == 0, done.stderr
    report = run_command(tmp_path, "runs", "--baseline", "most_popular", "--out", "report",
                         command="linrec-report")
    assert report.returncode == 0, report.stderr
    text = (tmp_path / "report" / "report_test.md").read_text()
    assert "| als |" in text and "| most_popular |" in text
    done = run_command(tmp_path, "missing.trec", *DATA_OVERRIDES, command="linrec-evaluate")
    assert done.returncode == 2
    assert done.stderr.strip() == "linrec-evaluate: error: missing.trec: no such run file"
