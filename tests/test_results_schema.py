"""The results.json schema checker: it finds what a record misses, mistypes or adds, and it
passes a real record (every run the tests start is checked against it, in conftest.run_command).
"""

from __future__ import annotations

import copy

import pytest

from linrec.results_schema import RESULTS_SCHEMA, schema_markdown, schema_problems

SPLIT = {"n_users": 3, "n_targets": 4, "exact": {"recall@20": 0.5, "auc": 0.9},
         "timings": {"score": 0.1, "rank": 0.1, "hooks": 0.0, "metrics": 0.0, "total": 0.2}}
RECORD = {
    "dataset": {"name": "synthetic", "n_users": 3, "n_items": 5, "n_interactions": 9,
                "split_n_items": 5, "n_train_users": 3, "n_train_interactions": 5},
    "model": "ease",
    "splits": {"test": SPLIT},
    "selection": {"metric": "recall@20", "split": "test", "value": 0.5},
    "timings": {"data": 0.1, "fit": 0.2, "evaluate": 0.3},
    "environment": {"linrec": {"version": "0.1.0"}, "created": "2026-01-01T00:00:00+00:00",
                    "python": "3.11.7", "platform": "Linux", "hostname": "h",
                    "libraries": {"numpy": "2.0"}, "cpu_cores": 2, "linrec_threads": 2,
                    "env_threads": {}},
    "seed": 0,
    "overrides": [],
    "config": {"anything": {"goes": [1]}},
}


def test_a_complete_record_matches():
    assert schema_problems(RECORD) == []


@pytest.mark.parametrize("edit, problem", [
    (lambda r: r.pop("model"), "results.model: missing"),
    (lambda r: r["splits"]["test"]["exact"].update({"recall@20": "0.5"}),
     "results.splits.test.exact.recall@20: str"),
    (lambda r: r.update(extra=1), "results.extra: not in the schema"),
    (lambda r: r["splits"].update(train=SPLIT), "results.splits.train: not in the schema"),
    (lambda r: r["environment"].update(cpu_cores=True), "results.environment.cpu_cores: bool"),
    (lambda r: r["timings"].pop("fit"), "results.timings.fit: missing"),
])
def test_what_does_not_match_is_named(edit, problem):
    record = copy.deepcopy(RECORD)
    edit(record)
    problems = schema_problems(record)
    assert len(problems) == 1 and problems[0].startswith(problem), problems


def test_the_reference_table_lists_every_key():
    table = schema_markdown()

    def paths(key, prefix=""):
        for child in key.children:
            path = f"{prefix}.{child.name}" if prefix else child.name
            yield path
            yield from paths(child, path)

    for path in paths(RESULTS_SCHEMA):
        assert f"| `{path}` |" in table
