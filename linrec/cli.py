"""Command-line entry points: `linrec` (a Hydra run or multirun), `linrec-report` (aggregate),
`linrec-recommend` and `linrec-evaluate`; the console scripts run them through
`linrec.process_exit.console_script`."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from linrec.errors import LinrecError
from linrec.process_exit import console_script

log = logging.getLogger("linrec")
#: at most this many compositions check a sweep's overrides before Hydra runs it
_MAX_PRECHECKS = 64
#: what `hydra/sweeper=optuna` selects (conf/hydra/sweeper/linrec_optuna.yaml)
OPTUNA_SWEEPER = "hydra/sweeper=linrec_optuna"
#: the sweeper of `linrec -m` without another one (conf/hydra/sweeper/linrec_basic.yaml)
BASIC_SWEEPER = "hydra/sweeper=linrec_basic"


def config_dir() -> str:
    """The Hydra config directory: $LINREC_CONF, else the configs installed with linrec (the
    package `linrec.conf`, which is the checkout's conf/ in an editable install), else, for a
    source tree run without installing, the conf/ beside the package."""
    env = os.environ.get("LINREC_CONF")
    if env:
        path = Path(env)
    else:
        try:
            from importlib.resources import files

            path = files("linrec.conf")
        except ModuleNotFoundError:
            path = Path(__file__).resolve().parents[1] / "conf"
    if not isinstance(path, Path) or not (path / "config.yaml").is_file():
        sys.exit(f"linrec: error: no config.yaml in {path}; set LINREC_CONF to a directory "
                 "of linrec's configs")
    return str(path)


# ---------------------------------------------------------------------------------------------
# composition errors as linrec messages


def _job_overrides(overrides: Sequence[str]) -> list[list[str]]:
    """The override lists to compose before a sweep runs: every value of every choice/range
    sweep, the other sweeps at their first value (an interval sweep is left to its sweeper)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(list(overrides))
    options: list[list[str]] = []
    for override in parsed:
        if not override.is_sweep_override():
            options.append([override.input_line])
            continue
        try:
            values = list(override.sweep_string_iterator())
        except Exception:  # noqa: BLE001 - interval sweeps and the like: Hydra checks them
            options.append([])
            continue
        prefix = f"{override.get_key_element()}="
        options.append([prefix + v for v in values])
    firsts = [o[0] for o in options if o]
    jobs = [firsts]
    for i, choices in enumerate(options):
        for value in choices[1:]:
            job = [value if j == i else o[0] for j, o in enumerate(options) if o]
            jobs.append(job)
    return jobs[:_MAX_PRECHECKS]


def _allowed_fields(compose: Callable[[list[str]], object], overrides: list[str],
                    full_key: str) -> tuple[str, list[str]]:
    """(label of the config that holds full_key's parent, its field names)."""
    from omegaconf import OmegaConf

    parent_key = full_key.rpartition(".")[0]
    clean = [o for o in overrides if not o.lstrip("+~").startswith(full_key)]
    try:
        node = OmegaConf.select(compose(clean), parent_key) if parent_key else compose(clean)
    except Exception:  # noqa: BLE001 - the parent itself does not compose: no list to give
        return parent_key, []
    if node is None or not OmegaConf.is_dict(node):
        return parent_key, []
    label = parent_key
    if parent_key == "model" and "name" in node:
        label = f"model {node['name']!r}"
    return label, [k for k in node if not (parent_key == "model" and k == "name")]


def composition_error(exc: BaseException, overrides: list[str],
                      compose: Callable[[list[str]], object]) -> str:
    """A one-line message for an exception of Hydra's composition of `overrides`."""
    from hydra.errors import MissingConfigException
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError, ValidationError

    cause = exc
    while cause.__cause__ is not None and not isinstance(cause, (ConfigKeyError,
                                                                   ValidationError)):
        cause = cause.__cause__
    full_key = getattr(cause, "full_key", None)
    if isinstance(cause, (ConfigKeyError, ConfigAttributeError)) and full_key:
        label, allowed = _allowed_fields(compose, overrides, full_key)
        field = full_key.rpartition(".")[2]
        listing = f"; allowed: {', '.join(allowed)}" if allowed else ""
        return f"{label or 'the config'} has no field {field!r} ({full_key}){listing}"
    if isinstance(cause, ValidationError) and full_key:
        return f"{full_key}: {str(cause.msg).splitlines()[0]}"
    if isinstance(exc, MissingConfigException) or "Could not find" in str(exc):
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        return " ".join(lines)
    return " ".join(str(exc).split())


def override_syntax_error(overrides: Sequence[str]) -> str | None:
    """The message for the first of `overrides` that Hydra's override grammar cannot read (the
    override, the grammar's reason, how to quote a value), None when each reads on its own."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    for override in overrides:
        try:
            parser.parse_override(override)
        except Exception as exc:  # noqa: BLE001 - Hydra's grammar errors have no common type
            reason = str(exc).splitlines()[0] if str(exc).strip() else type(exc).__name__
            return (f"cannot read the override {override!r}: {reason}; a value with '=', "
                    "spaces, brackets or commas of its own goes in quotes, key='value' (in a "
                    "shell: \"key='value'\"); the grammar: "
                    "https://hydra.cc/docs/1.2/advanced/override_grammar/basic")
    return None


@dataclass
class Prechecked:
    """What `precheck` found: the first error as a linrec message (None when every job composes
    and checks); when every job composed and checked, the first job's config as Hydra's run
    composes it (`hydra` node included, which names its config) and the overrides it came
    from."""

    problem: str | None = None
    config: Any = None
    overrides: list[str] | None = None


def precheck(argv: Sequence[str]) -> Prechecked:
    """Compose the config of the command line's jobs as Hydra will and build each one's typed
    RunConfig (every range and choice checked), before Hydra makes any directory."""
    from hydra import compose, initialize_config_dir
    from hydra._internal.utils import get_args_parser
    from omegaconf import OmegaConf

    try:
        args = get_args_parser().parse_args(list(argv))
    except SystemExit:
        return Prechecked()  # let Hydra report its own usage errors
    if args.shell_completion or args.info or args.hydra_help or args.help:
        return Prechecked()  # Hydra composes what it prints; nothing runs
    try:
        jobs = _job_overrides(args.overrides)
    except Exception:  # noqa: BLE001 - a syntax error: name the override (else Hydra's message)
        return Prechecked(override_syntax_error(args.overrides))
    from linrec.hydra_compat import version_base

    first = None
    with initialize_config_dir(config_dir=config_dir(), job_name="linrec", **version_base()):
        def compose_job(overrides: list[str], with_hydra: bool = False) -> Any:
            return compose(config_name=args.config_name or "config", overrides=overrides,
                           return_hydra_config=with_hydra)

        for index, overrides in enumerate(jobs):
            try:
                cfg = compose_job(overrides, with_hydra=index == 0)
            except Exception as exc:  # noqa: BLE001 - every composition error is reported
                return Prechecked(composition_error(exc, overrides, compose_job))
            if index == 0:  # Hydra's run takes it as it is (hydra_compat.precomposed)
                first = cfg
                cfg = OmegaConf.masked_copy(cfg, [key for key in cfg if key != "hydra"])
            problem = _run_config_error(cfg)
            if problem:
                return Prechecked(problem)
    return Prechecked(config=first, overrides=jobs[0])


def _run_config_error(cfg: object) -> str | None:
    """The message of the ConfigError that building the job's RunConfig raises (a value out of
    range, an unknown choice), else None; `resume` is the job's, not the run's."""
    from omegaconf import OmegaConf

    from linrec.config import run_config
    from linrec.errors import ConfigError
    from linrec.params import check_bool

    try:
        plain = OmegaConf.to_container(cfg, resolve=True)
        check_bool(plain.pop("resume", True), "resume")
        run_config(plain)
    except ConfigError as exc:
        return str(exc)
    except Exception:  # noqa: BLE001 - an interpolation that needs the job: the job reports it
        return None
    return None


# ---------------------------------------------------------------------------------------------
# the linrec command


def _skip_complete(plain: dict, run_dir: Path) -> tuple[bool, float | None]:
    """(skip, returned value): a sweep job whose directory holds the complete result of this
    config is not run again (linrec/sweeps.py); otherwise what an earlier attempt left is
    cleared first (a complete run's outputs set aside, `sweeps.clear_outputs`)."""
    from linrec import sweeps
    from linrec.config import run_config

    done = sweeps.complete_result(run_dir, run_config(plain).to_dict())
    if done is not None:
        print(f"linrec: {run_dir}: complete, skipped (resume=false runs it again)")
        return True, sweeps.recorded_selection(done)
    sweeps.clear_outputs(run_dir)
    return False, None


def _task(cfg) -> float | None:
    """One Hydra job: run the experiment. A LinrecError becomes a FAILED marker and a one-line
    message, any other error a FAILED marker with its traceback (also in the job's log); a
    single run then exits (2, or Hydra's traceback and 1), a sweep goes on with its next job and
    `main` lists the failures and exits 2 at the end. A SIGTERM or SIGINT marks the job FAILED
    and stops. In a sweep a complete job is skipped."""
    import signal

    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode
    from omegaconf import OmegaConf

    from linrec import interrupts, sweeps, tracking
    from linrec.atomic import write_text_atomic
    from linrec.experiment import run
    from linrec.params import check_bool
    from linrec.plugins import load_plugins
    from linrec.results import RESULTS_FILE, mark_failed, read_results
    from linrec.trials import PRUNED, PRUNED_FILE, Pruned

    hydra_cfg = HydraConfig.get()
    run_dir = Path(hydra_cfg.runtime.output_dir)
    sweeping = hydra_cfg.mode == RunMode.MULTIRUN
    try:
        plain = OmegaConf.to_container(cfg, resolve=True)
        # a joblib worker or a SLURM job loads the plugins of the command that started it
        load_plugins(plain.get("plugins") or ())
        resume = check_bool(plain.pop("resume", True), "resume")
        if not resume and isinstance(plain.get("model"), dict) and "resume" in plain["model"]:
            plain["model"]["resume"] = False  # one switch: the model starts over too
        if sweeping and resume:
            skip, value = _skip_complete(plain, run_dir)
            if skip:
                return value
        else:  # a run into a directory that held an older one never mixes the two
            sweeps.clear_outputs(run_dir)
        n_jobs = sweeps.parallel_jobs(hydra_cfg) if sweeping else 1
        with interrupts.signals_raise(), sweeps.thread_budget(n_jobs), tracking.tracked(
                plain.get("tracking"), plain, run_dir,
                sweep_dir=hydra_cfg.sweep.dir if sweeping else None) as tracker:
            value = run(plain, run_dir=run_dir, overrides=list(hydra_cfg.overrides.task),
                        in_sweep=sweeping)
            if tracker is not None:
                tracker.finish(run_dir, read_results(run_dir / RESULTS_FILE))
            return value
    except Pruned as pruned:  # an Optuna trial its pruner stopped: not a failure
        write_text_atomic(run_dir / PRUNED_FILE, f"{pruned}\n")
        print(f"linrec: {run_dir}: {pruned}")
        return PRUNED
    except LinrecError as exc:
        mark_failed(run_dir, f"{type(exc).__name__}: {exc}")
        print(f"linrec: error: {exc}", file=sys.stderr)
        if not sweeping:
            sys.exit(2)
        return None
    except (interrupts.Interrupted, KeyboardInterrupt) as exc:
        _interrupted(run_dir, getattr(exc, "signum", signal.SIGINT))
    except OSError as exc:  # a full disk, a permission: one line; the traceback in FAILED
        import traceback

        _mark_failed_if_possible(run_dir, f"{type(exc).__name__}: {exc}\n\n"
                                 f"{traceback.format_exc()}")
        print(f"linrec: error: {os_error_text(exc)}", file=sys.stderr)
        if not sweeping:
            sys.exit(2)
        return None
    except Exception as exc:  # an internal error: keep its traceback, still mark the run
        import traceback

        if (interrupt := interrupts.interrupt_behind(exc)) is not None:
            _interrupted(run_dir, interrupt.signum)  # a library turned the signal into its error
        trace = traceback.format_exc()
        mark_failed(run_dir, f"{type(exc).__name__}: {exc}\n\n{trace}")
        log.error("%s: internal error, marked FAILED:\n%s", run_dir, trace)
        if not sweeping:
            raise
        print(f"linrec: error: {run_dir}: {type(exc).__name__}: {exc} (traceback in "
              f"{run_dir / 'FAILED'})", file=sys.stderr)
        return None


#: Hydra plugins of the `sweep` extra: the command-line choice -> the module that provides it
SWEEP_EXTRA = {
    "hydra/sweeper=optuna": "optuna",
    "hydra/launcher=joblib": "hydra_plugins.hydra_joblib_launcher",
    "hydra/launcher=submitit_slurm": "hydra_plugins.hydra_submitit_launcher",
    "hydra/launcher=submitit_local": "hydra_plugins.hydra_submitit_launcher",
}


def missing_extra(argv: Sequence[str]) -> str | None:
    """A message when the command line chooses a sweeper or launcher of the `sweep` extra and
    that extra is not installed (Hydra would only say it cannot find the config)."""
    from importlib.util import find_spec

    for arg in argv:
        module = SWEEP_EXTRA.get(arg.lstrip("+"))
        if module and find_spec(module) is None:
            return (f"{arg.lstrip('+')} needs linrec's `sweep` extra: "
                    "pip install 'linrec[sweep]' (or -e '.[sweep]' in a checkout)")
    return None


def os_error_text(exc: OSError) -> str:
    """'<path>: <cause>' of an operating-system error (the cause alone when it names no path)."""
    cause = exc.strerror or str(exc)
    return f"{exc.filename}: {cause}" if exc.filename else cause


def _interrupted(run_dir: Path, signum: int) -> None:
    """Mark the run stopped by signal `signum` FAILED and exit 128 + signum."""
    import signal

    from linrec.results import mark_failed

    name = signal.Signals(signum).name
    mark_failed(run_dir, f"interrupted by {name}")
    print(f"linrec: {run_dir}: interrupted by {name}, marked FAILED", file=sys.stderr)
    sys.exit(128 + signum)


def _mark_failed_if_possible(run_dir: Path, message: str) -> None:
    """mark_failed, which an error of the disk itself may also stop: then say so."""
    from linrec.results import mark_failed

    try:
        mark_failed(run_dir, message)
    except OSError as exc:
        print(f"linrec: could not mark {run_dir} FAILED: {os_error_text(exc)}", file=sys.stderr)


def main() -> None:
    """`linrec [overrides...]`: see README.md."""
    if sys.argv[1:] == ["--version"]:  # linrec's, not Hydra's own; before the heavy imports
        from linrec.results import version_text

        print(version_text())
        return
    import hydra

    from linrec.config import register_configs
    from linrec.hydra_compat import one_repository_per_listing, precomposed, version_base
    from linrec.plugins import plugins_in_overrides
    from linrec.sweeps import register_resolvers, sweep_overrides

    # `resume` is in the config: `+resume=...`, its spelling before that, sets it all the same
    sys.argv = [a.removeprefix("+") if a.startswith("+resume=") else a for a in sys.argv]
    _load_plugins_or_exit("linrec", plugins_in_overrides(sys.argv[1:]))
    register_configs()
    register_resolvers()  # the sweep directories' names in conf/config.yaml
    problem = missing_extra(sys.argv[1:])
    # `optuna` names linrec's own Optuna sweeper; Hydra's basic sweeper would compose every job
    # a second time after the precheck, linrec's does not
    chosen = {"hydra/sweeper=optuna": OPTUNA_SWEEPER, "hydra/sweeper=basic": BASIC_SWEEPER}
    sys.argv = [chosen.get(a, a) for a in sys.argv]
    checked = precheck(sys.argv[1:]) if problem is None else Prechecked(problem)
    if checked.problem:
        print(f"linrec: error: {checked.problem}", file=sys.stderr)
        sys.exit(2)
    if {"-m", "--multirun"} & set(sys.argv[1:]):
        if not any(a.lstrip("+").startswith("hydra/sweeper=") for a in sys.argv[1:]):
            sys.argv.append(BASIC_SWEEPER)
        sys.argv += sweep_overrides([a for a in sys.argv[1:] if not a.startswith("-")])
    from linrec import interrupts

    sweeping = bool({"-m", "--multirun"} & set(sys.argv[1:]))
    listing = bool({"--help", "-h", "--hydra-help"} & set(sys.argv[1:]))
    if sweeping:
        # the resource tracker of a joblib sweep whose workers a signal stopped reports their
        # semaphores at its exit; the workers are gone on purpose (it inherits this option)
        sys.warnoptions.append("ignore:resource_tracker:UserWarning")
    try:
        # a sweep's own process: SIGTERM / SIGINT stop it as a whole (its launcher's workers
        # with it), not only the job it may be running itself
        with interrupts.signals_raise() if sweeping else contextlib.nullcontext(), \
                precomposed(checked.config, checked.overrides) \
                if checked.config is not None else contextlib.nullcontext(), \
                one_repository_per_listing() if listing else contextlib.nullcontext():
            hydra.main(config_path=config_dir(), config_name="config", **version_base())(_task)()
    except interrupts.Interrupted as stop:
        _stopped_sweep(stop.signum)
    except SystemExit as stop:  # a signal, or Hydra stopped on an error: list the sweep first
        _print_sweep_table()
        _exit_listing_failures(stop.code)
        raise
    _print_sweep_table()
    _exit_listing_failures(0)


def _stopped_sweep(signum: int) -> None:
    """The sweep's process got SIGTERM or SIGINT (its launcher's workers are gone: joblib kills
    them on the way out): mark the jobs in flight FAILED, print the table of what completed,
    name the jobs that did not run, and exit 128 + signum. The same command runs the rest."""
    import signal

    from linrec.sweeps import SweepCallback, stop_sweep

    name = signal.Signals(signum).name
    last = SweepCallback.last
    if last:
        marked, not_started = stop_sweep(last["dir"], last["started"],
                                         f"interrupted by {name}: the sweep was stopped")
        _print_sweep_table()
        lines = [f"  {job}: interrupted by {name}, marked FAILED" for job in marked]
        lines += [f"  {overrides}: did not run" for overrides in not_started]
        if lines:
            print("\n".join([f"linrec: the sweep was stopped by {name}:", *lines,
                             "The same command runs them (complete jobs are skipped)."]),
                  file=sys.stderr)
    else:
        print(f"linrec: stopped by {name}", file=sys.stderr)
    sys.exit(128 + signum)


def _print_sweep_table() -> None:
    """After a sweep (not a single run): the table of its jobs (`sweeps.sweep_table`)."""
    from linrec.sweeps import SweepCallback, sweep_table

    last = SweepCallback.last
    if last:
        lines = sweep_table(last["dir"], last["started"])
        if lines:
            print("\n" + "\n".join(lines))


def _load_plugins_or_exit(command: str, specs: Sequence[str] = ()) -> None:
    """Load the plugins (linrec.plugins: entry points, $LINREC_PLUGINS, `specs`) before a
    command reads a config; one line and exit 2 when one fails."""
    from linrec.plugins import PluginError, load_plugins

    try:
        load_plugins(specs)
    except PluginError as exc:
        print(f"{command}: error: {exc}", file=sys.stderr)
        sys.exit(2)


def _exit_listing_failures(code: int | str | None) -> None:
    """After a sweep: list the jobs that failed or left no results and exit 2 (a signal's exit
    code 128 + n is kept); nothing when every job completed (`code`: how Hydra ended)."""
    from linrec.sweeps import unfinished_jobs_of_last_sweep

    unfinished = unfinished_jobs_of_last_sweep()
    if not unfinished:
        return
    listing = "\n  ".join(f"{path}: {why}" for path, why in unfinished)
    stopped = "" if code in (0, None) else \
        ("\nThe sweep stopped before its end: jobs not listed did not run; the same command "
         "runs them (complete jobs are skipped).")
    print(f"linrec: error: {len(unfinished)} sweep job(s) failed:\n  {listing}{stopped}",
          file=sys.stderr)
    sys.exit(code if isinstance(code, int) and code > 128 else 2)


# ---------------------------------------------------------------------------------------------
# linrec-report


def report_main(argv: list[str] | None = None) -> int:
    """`linrec-report DIR...`: see linrec/report/__init__.py and README.md."""
    from linrec.report import main as report

    _load_plugins_or_exit("linrec-report")
    try:
        return report(argv)
    except LinrecError as exc:
        print(f"linrec-report: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `linrec-report DIR | head`: the reader left, nothing is wrong
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


# ---------------------------------------------------------------------------------------------
# linrec-recommend


def recommend_main(argv: list[str] | None = None) -> int:
    """`linrec-recommend RUN_DIR`: see linrec/recommend.py and README.md."""
    from linrec.recommend import main as recommend

    _load_plugins_or_exit("linrec-recommend")
    try:
        return recommend(argv)
    except LinrecError as exc:
        print(f"linrec-recommend: error: {exc}", file=sys.stderr)
        return 2


# ---------------------------------------------------------------------------------------------
# linrec-evaluate


def evaluate_main(argv: list[str] | None = None) -> int:
    """`linrec-evaluate RUN_FILE [options] [overrides...]`: score a run file written by another
    library with linrec's evaluation (linrec/external.py)."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="linrec-evaluate",
        description="Score per-user ranked lists written by any library (TREC run format, or "
                    "CSV/TSV/Parquet with columns user,item,score) on a linrec data split; "
                    "writes results.json as a linrec run does.")
    parser.add_argument("run_file", help="the ranked lists, by the dataset's own ids")
    parser.add_argument("--format", default="auto",
                        help="trec, csv, tsv or parquet (auto: from the file's suffix)")
    parser.add_argument("--label", default=None,
                        help="the model's name in results.json and reports (default: the "
                             "file's stem)")
    parser.add_argument("--out", default=None,
                        help="the run directory (default: outputs/evaluate/<label>)")
    parser.add_argument("overrides", nargs="*",
                        help="linrec overrides of the data and eval blocks (data=lightgcn "
                             "data.path=...); eval.splits defaults to [test]")
    args = parser.parse_intermixed_args(argv)
    overrides = list(args.overrides)
    from omegaconf import OmegaConf

    from linrec.config import register_configs, run_config
    from linrec.external import evaluate_run_file
    from linrec.plugins import plugins_in_overrides
    from linrec.results import print_run

    _load_plugins_or_exit("linrec-evaluate", plugins_in_overrides(overrides))
    register_configs()
    if not any(o.lstrip("+").startswith("eval.splits=") for o in overrides):
        overrides.insert(0, "eval.splits=[test]")
    checked = precheck(overrides)
    if checked.problem:
        print(f"linrec-evaluate: error: {checked.problem}", file=sys.stderr)
        return 2
    label = args.label or Path(args.run_file).stem
    run_dir = Path(args.out or Path("outputs") / "evaluate" / label)
    logging.basicConfig(level=logging.WARNING, format="linrec-evaluate: %(message)s")
    try:
        cfg = OmegaConf.masked_copy(checked.config, [k for k in checked.config if k != "hydra"])
        plain = OmegaConf.to_container(cfg, resolve=True)
        plain.pop("resume", None)
        record = evaluate_run_file(args.run_file, run_config(plain), run_dir, fmt=args.format,
                                   label=label, overrides=overrides)
    except LinrecError as exc:
        print(f"linrec-evaluate: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"linrec-evaluate: error: {os_error_text(exc)}", file=sys.stderr)
        return 2
    print_run(record, run_dir / "results.json", quiet=record["config"].get("quiet", False),
              verbose=record["config"].get("verbose", False))
    return 0


# ---------------------------------------------------------------------------------------------
# the console scripts (pyproject.toml): each command's function, then the process's exit
# without the interpreter's teardown of the modules (linrec.process_exit)

linrec_script = console_script(main)
report_script = console_script(report_main)
recommend_script = console_script(recommend_main)
evaluate_script = console_script(evaluate_main)
