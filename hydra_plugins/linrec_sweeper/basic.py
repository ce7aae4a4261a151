"""The basic sweeper behind `linrec -m` (conf/hydra/sweeper/linrec_basic.yaml).

Hydra's BasicSweeper composes every job's config once before launching a batch
(`validate_batch_is_legal`) only to catch composition errors early, and the launcher composes
it again to run it. The `linrec` command has already composed every swept value (each with
the first value of the other sweeps, up to 64 compositions) and built its typed RunConfig
before Hydra started (`linrec.cli.precheck`, which fails in one line before any directory is
made): a key missing under a group choice, an unknown choice or a value out of range is caught
there. So the batch validation is skipped: ~0.1 s per job, a seventh of a 20-job LRR sweep on
3 000 items. An error it alone would have caught (beyond the precheck's 64 compositions) fails
its job instead, which `linrec -m` lists at the end (exit 2). Everything else is Hydra's
BasicSweeper.
"""

from __future__ import annotations

from collections.abc import Sequence

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper


class LinrecBasicSweeper(BasicSweeper):
    """BasicSweeper without the second composition of every job (see the module docstring);
    the jobs it plans are noted in `linrec.sweeps.PLANNED_JOBS`, so that a sweep stopped by a
    signal can name the jobs that did not run."""

    def validate_batch_is_legal(self, batch: Sequence[Sequence[str]]) -> None:
        return None

    @staticmethod
    def split_arguments(overrides, max_batch_size):  # noqa: ANN001, ANN205 - Hydra's signature
        from linrec import sweeps

        batches = BasicSweeper.split_arguments(overrides, max_batch_size)
        sweeps.PLANNED_JOBS[:] = [list(job) for batch in batches for job in batch]
        return batches
