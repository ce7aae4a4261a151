"""Every command the documentation shows runs (tests/documented.py says how): the README's, the
guides', experiments/README.md's and the presets' header comments; and every one is either run
or named, with its reason, as run elsewhere."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.documented import (
    ROOT,
    Block,
    StandIns,
    bash_commands,
    documented_pages,
    environment,
    not_run_reason,
    outcome_report,
    program_of,
    run_page,
    shrink_token,
    shrunk_conf,
)
from tests.forkserver import ForkServer

PAGES = documented_pages()


@pytest.fixture(scope="module")
def documented_env(tmp_path_factory):
    """What every page runs with: the shrunk configs, the stand-in data files (made up front),
    one data cache and one preloaded interpreter; each page is its own test, so that the pytest
    workers share the pages out."""
    root = tmp_path_factory.mktemp("documented")
    conf = shrunk_conf(root / "conf")
    stand_ins = StandIns(root / "data")
    for documented in StandIns.WRITERS:
        stand_ins.path_for(documented)
    env = environment(root / "cache", conf)
    server = ForkServer(env)
    yield root, env, stand_ins, server
    server.close()


@pytest.mark.parametrize("page", list(PAGES), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_documented_command_runs(documented_env, page):
    root, env, stand_ins, server = documented_env
    workdir = root / f"page_{list(PAGES).index(page)}"
    outcomes = run_page(PAGES[page], workdir, env, stand_ins, server)
    assert outcomes, f"{page}: no command ran"
    assert all(o.returncode == 0 for o in outcomes), outcome_report(outcomes)


def test_the_pages_show_commands_of_every_kind():
    """The extraction itself: the README's quick start, a guide's python blocks and a preset's
    header commands are all found."""
    readme = [b for b in PAGES[ROOT / "README.md"] if b.language == "bash"]
    words = [c.words for b in readme for c in bash_commands(b, {})]
    assert [".venv/bin/linrec"] in words
    assert any(b.language == "python" for b in PAGES[ROOT / "docs" / "howto" / "python-api.md"])
    assert any(ROOT / "conf" / "experiment" in p.parents for p in PAGES)


def test_a_command_is_run_or_named_as_run_elsewhere():
    for blocks in PAGES.values():
        variables: dict[str, str] = {}
        for block in (b for b in blocks if b.language == "bash"):
            for command in bash_commands(block, variables):
                assert program_of(command.words) or not_run_reason(command.words), (
                    f"{block.where}: {command.shown!r} is neither run by the tests nor named "
                    "in tests/documented.py NOT_RUN_HERE")


def test_variables_continuations_and_comments_are_read_as_bash_reads_them():
    block = Block(ROOT / "README.md", 1, "bash",
                  'D="data.path=/data/gowalla"   # the split\n'
                  "linrec data=lightgcn $D \\\n"
                  "       model=ease  # the model\n"
                  "export LINREC_DATA=/shared/$USER/cache && linrec-report 'a b'/")
    variables = {"USER": "me"}
    commands = bash_commands(block, variables)
    assert [c.words for c in commands] == [
        ["linrec", "data=lightgcn", "data.path=/data/gowalla", "model=ease"],
        ["linrec-report", "a b/"]]
    assert variables["LINREC_DATA"] == "/shared/me/cache" and commands[0].line == 2


def test_real_data_paths_and_long_values_are_shrunk(tmp_path):
    stand_ins = StandIns(tmp_path / "data")
    shrunk = shrink_token("data.path=/data/gowalla", stand_ins, tmp_path)
    assert (Path(shrunk.partition("=")[2]) / "train.txt").is_file()
    assert shrink_token("model.epochs=60", stand_ins, tmp_path) == "model.epochs=1"
    assert shrink_token("hydra.sweeper.n_trials=30", stand_ins, tmp_path) == \
        "hydra.sweeper.n_trials=3"
    assert shrink_token("model.rank=500,1000,2000", stand_ins, tmp_path) == "model.rank=8,16,24"
    assert shrink_token("model.lam=100,300", stand_ins, tmp_path) == "model.lam=100,300"
    assert shrink_token("model.temperature=0.1,0.2,0.3,0.4,0.5,0.7,1.0", stand_ins, tmp_path) == \
        "model.temperature=0.1,0.4,1.0"
    assert shrink_token("seed=0,1,2", stand_ins, tmp_path) == "seed=0,1,2"
    assert shrink_token("hydra.launcher.n_jobs=2", stand_ins, tmp_path) == \
        "hydra.launcher.n_jobs=1"
    assert shrink_token("study.models.lrr.grid.rank=[8,16,24,32]", stand_ins, tmp_path) == \
        "study.models.lrr.grid.rank=[8,16,24,32]"
    mapping = "+study.per_dataset.gowalla.mine_plus={temperature: 0.1, epochs: 60, lr: 1, n: 2}"
    assert shrink_token(mapping, stand_ins, tmp_path) == mapping
    with pytest.raises(LookupError, match="without a stand-in"):
        shrink_token("data.path=/data/unknown.csv", stand_ins, tmp_path)


def test_preset_commands_stand_on_lines_of_their_own():
    """A command in a YAML header is found only on its own comment line: none may hide in a
    sentence."""
    for path in sorted((ROOT / "conf").rglob("*.yaml")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if not line.startswith("#"):
                break
            text = line.lstrip("#").strip()
            inline = re.search(r"\blinrec(-report|-recommend)? [\w./+~-]+=", text)
            assert not inline or re.match(r"(linrec|linrec-report|linrec-recommend) ", text), \
                f"{path.relative_to(ROOT)}:{number}: a command inside a sentence: {text}"
