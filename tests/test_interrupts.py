"""SIGTERM and SIGINT become Interrupted, also when they land inside a checkpoint's write."""

from __future__ import annotations

import os
import signal
import time

import pytest
import torch

from linrec import interrupts
from tests.conftest import run_command

SMALL = ["data.source.n_users=300", "data.source.n_items=100", "eval.sampled.enabled=false",
         "quiet=true"]


def test_signals_raise_interrupted_within_and_are_restored_after():
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(interrupts.Interrupted) as info, interrupts.signals_raise():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
    assert info.value.signum == signal.SIGTERM and "SIGTERM" in str(info.value)
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_deferred_signal_is_raised_when_the_block_ends():
    done = []
    with pytest.raises(interrupts.Interrupted) as info, interrupts.signals_raise():
        with interrupts.signals_deferred():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.2)  # the handler has run by now; the block goes on
            with interrupts.signals_deferred():  # nested: only the outer end raises
                done.append("inner")
            done.append("outer")
        done.append("after")  # never reached
    assert info.value.signum == signal.SIGINT and done == ["inner", "outer"]
    with interrupts.signals_raise(), interrupts.signals_deferred():
        pass  # nothing pending is left over from the block above


def test_interrupt_behind_finds_the_signal_under_another_error():
    try:
        try:
            raise interrupts.Interrupted(signal.SIGTERM)
        except interrupts.Interrupted:
            raise RuntimeError("a library's own error") from None
    except RuntimeError as exc:
        found = interrupts.interrupt_behind(exc)  # `from None` hides it from print, not __context__
    assert found is not None and found.signum == signal.SIGTERM
    assert interrupts.interrupt_behind(ValueError("plain")) is None


def test_torch_save_hides_a_signal_in_its_write_in_its_own_error(tmp_path):
    """The failure the deferral exists for: a signal raised inside a Python write that torch's
    C++ zip writer called comes out as a RuntimeError."""

    class SignalOnWrite:
        def __init__(self, fh):
            self.fh, self.sent = fh, False

        def write(self, data):
            if not self.sent:
                self.sent = True
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.2)
            return self.fh.write(data)

        def flush(self):
            self.fh.flush()

    with open(tmp_path / "x.pt", "wb") as fh, pytest.raises(BaseException) as info:
        with interrupts.signals_raise():
            torch.save({"x": torch.zeros(1000)}, SignalOnWrite(fh))
    assert interrupts.interrupt_behind(info.value) is not None


#: a SIGTERM that the MF run sends itself in the middle of writing its epoch-2 checkpoint
SIGNAL_IN_CHECKPOINT = """
import os, signal, time, torch
from linrec.models import training
_save = torch.save
def _signalled(obj, fh, *args, **kwargs):
    if obj.get("epoch") == 2:
        class Writer:
            def write(self, data):
                if not getattr(self, "sent", False):
                    self.sent = True
                    os.kill(os.getpid(), signal.SIGTERM)
                    time.sleep(0.2)
                return fh.write(data)
            def flush(self):
                fh.flush()
        return _save(obj, Writer(), *args, **kwargs)
    return _save(obj, fh, *args, **kwargs)
training.torch.save = _signalled
"""


def test_a_signal_during_a_checkpoint_write_marks_the_run_failed_and_keeps_the_checkpoint(
        tmp_path):
    proc = run_command(tmp_path, "hydra.run.dir=run", "model=mf", "model.epochs=5",
                       "model.stop_patience=1000000",
                       f"model.checkpoint_dir={tmp_path / 'checkpoints'}", *SMALL,
                       prelude=SIGNAL_IN_CHECKPOINT)
    assert proc.returncode == 128 + signal.SIGTERM, proc.stderr
    assert "interrupted by SIGTERM" in (tmp_path / "run" / "FAILED").read_text()
    (checkpoint,) = (tmp_path / "checkpoints").rglob("*.pt")
    assert torch.load(checkpoint, weights_only=False)["epoch"] == 2  # written whole
