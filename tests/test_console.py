"""linrec.console: aligned tables whose cells never run together, and progress that is a plain
line every few seconds off a terminal."""

from __future__ import annotations

from linrec.console import cell, text_table


def test_progress_is_a_plain_line_every_few_seconds_off_a_terminal(monkeypatch, capsys):
    """Off a terminal a long task prints at most one line per PLAIN_EVERY seconds, naming the
    task, the count and its state; work shorter than QUIET_BELOW prints nothing."""
    from linrec import console

    clock = iter([0.0, 0.5, 1.0, 3.0, 4.0, 9.0, 9.5, 15.0, 15.1])
    monkeypatch.setattr(console.time, "monotonic", lambda: next(clock))
    monkeypatch.setenv(console.PROGRESS_ENV, "plain")
    with console.progress("mf", 4, unit="epochs") as task:  # starts at 0.0
        task.advance()                   # 0.5: under QUIET_BELOW, nothing
        task.update("valid recall@20 0.2")  # 1.0: nothing
        task.advance()                   # 3.0: first line? 3.0 - 0.0 < PLAIN_EVERY: no
        task.advance()                   # 4.0: no
        task.advance()                   # 9.0: 9.0 - 0.0 >= 5: a line
        task.update("done")              # 9.5: no (0.5 s after the last line)
        task.advance()                   # 15.0: a line
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["linrec: mf: 4/4 epochs, 9 s; valid recall@20 0.2",
                     "linrec: mf: 5/4 epochs, 15 s; done"]


def test_table_columns_are_as_wide_as_their_widest_cell():
    rows = [["ls", cell(12643565.5283), "diverged"], ["mle", cell(0.25), cell(None)]]
    lines = text_table(["estimator", "recall@1", "recall@5"], rows)
    assert lines == ["estimator       recall@1  recall@5",
                     "ls         12643565.5283  diverged",
                     "mle               0.2500         –"]
