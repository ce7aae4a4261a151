"""linrec.report.cli: the command line writes the report and prints its Markdown."""

from __future__ import annotations

import pytest

from linrec.errors import ConfigError
from linrec.report.cli import main
from tests.report.records import run_record, write_record


def test_the_command_writes_and_prints_the_report(tmp_path, capsys):
    for seed in (0, 1):
        write_record(tmp_path / "runs" / f"s{seed}", run_record(1.0, seed, 0.3 + 0.1 * seed))
    assert main([str(tmp_path / "runs"), "--out", str(tmp_path / "out"), "--no-figures",
                 "--metrics", "ndcg@10", "--split", "test"]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("# linrec report: test split")
    assert f"wrote 8 files to {tmp_path / 'out'} (2 runs)" in printed
    md = (tmp_path / "out" / "report_test.md").read_text()
    assert "| ease |  | 2 | 0.1750 | **0.3500** ± 0.0707 |" in md
    assert not (tmp_path / "out" / "figures").exists()
    with pytest.raises(ConfigError, match=r"--metrics \['ndcg@5'\] are not in the runs' test"):
        main([str(tmp_path / "runs"), "--metrics", "ndcg@5"])
