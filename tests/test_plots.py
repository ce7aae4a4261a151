"""linrec.plots: the Figure 11 view of spectral profiles, written atomically."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from matplotlib.figure import Figure

from linrec.errors import ConfigError
from linrec.models.profile import spectral_profile
from linrec.models.spectral import LRR, ClosedFormMF, compute_spectrum
from linrec.plots import plot_spectral_profile


@pytest.fixture(scope="module")
def train() -> sp.csr_matrix:
    rng = np.random.default_rng(21)
    dense = rng.random((200, 30)) < 0.2
    dense[rng.integers(0, 200, 30), np.arange(30)] = True
    return sp.csr_matrix(dense.astype(np.float32))


def test_plot_spectral_profile_writes_atomically(tmp_path, train):
    spectrum = compute_spectrum(train)
    profiles = {
        "LRR": spectral_profile(LRR(rank=20, lam=30.0).fit(train)),
        "MF": spectral_profile(ClosedFormMF(rank=20, lam=3.0).fit(train)),
    }
    path = tmp_path / "fig" / "profile.png"
    fig = plot_spectral_profile(profiles, path=path)
    assert isinstance(fig, Figure)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in path.parent.iterdir()) == ["profile.png"]
    ax = fig.axes[0]
    assert [line.get_label() for line in ax.get_lines()] == ["LRR", "MF"]
    np.testing.assert_allclose(ax.get_lines()[1].get_ydata(), profiles["MF"])
    shrunk = plot_spectral_profile(profiles, spectrum.singular_values, quantity="shrunk")
    lines = shrunk.axes[0].get_lines()
    assert len(lines) == 3
    np.testing.assert_allclose(lines[1].get_ydata(), profiles["LRR"] * spectrum.singular_values)


@pytest.mark.parametrize("kwargs", [{"quantity": "log"}, {"quantity": "shrunk"},
                                    {"profiles": {}}])
def test_plot_spectral_profile_bad_input(kwargs):
    args = {"profiles": {"a": np.ones(3)}} | kwargs
    with pytest.raises(ConfigError):
        plot_spectral_profile(**args)
