"""The `ablate` command: thin subcommands that parse arguments and hand over to the library."""

from __future__ import annotations

import os
import signal
import sys


def _interrupted_while_starting(signum: int, frame: object) -> None:
    """A Ctrl-C while the command imports what it needs (a second or more): one line, as at any later moment."""
    os.write(2, b"interrupted\n")
    os._exit(130)


# Only as the command (the `ablate` script, python -m ablate.cli), never for a program that imports this module;
# and not where SIGINT is ignored (nohup ... &).
_COMMAND = __name__ == "__main__" or os.path.basename(sys.argv[0]) == "ablate"
if _COMMAND and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
    signal.signal(signal.SIGINT, _interrupted_while_starting)

import argparse  # noqa: E402 (after the handler above: a Ctrl-C during these imports is one line too)
import importlib.util  # noqa: E402
import json  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import NoReturn  # noqa: E402

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from ablate.errors import UserError  # noqa: E402
from ablate.report.tables import FORMATS  # noqa: E402
from ablate.sweep.launchers import LAUNCHERS  # noqa: E402
from ablate.train.worker import bound_primitive_caches, exit_at_once  # noqa: E402


class Parser(argparse.ArgumentParser):
    """argparse, with a bad flag reported in one line (`ablate run: argument --seeds: ...`), exit code 2."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: {message} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(2)


def main(argv: Sequence[str] | None = None) -> int:
    """`ablate COMMAND ...`: parses the command line and hands over to the command; the exit code."""
    if signal.getsignal(signal.SIGINT) is _interrupted_while_starting:
        signal.signal(signal.SIGINT, signal.default_int_handler)  # from here on, KeyboardInterrupt: handled below
    args = build_parser().parse_args(argv)
    bound_primitive_caches()  # before torch loads: under torchrun, jobs train in this process
    try:
        return args.handler(args)
    except UserError as error:
        for line in error.lines:
            print(line, file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `ablate report ... | head`: the reader has gone, and so has what it would have read
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the final flush has nowhere to fail
        return PIPE_CLOSED


PIPE_CLOSED = 128 + 13  # what a shell reports for a program SIGPIPE ended: not 1, a failed run (docs/running.md)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ablate")
    except PackageNotFoundError:  # run from a source tree that is not installed
        return "unknown (not installed)"


def build_parser() -> Parser:
    """Every command, flag and help text: an argparse table, one entry a flag."""
    parser = Parser(prog="ablate", description="Architecture ablations of the translation Transformer.")
    parser.add_argument("--version", action="version", version=f"ablate {_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = commands.add_parser("run", help="train and evaluate every run of experiment files")
    run.add_argument("files", nargs="+", metavar="FILE")
    what = run.add_argument_group("what to train")
    where = run.add_argument_group("where it trains")
    slurm = run.add_argument_group("on a Slurm cluster")
    design = run.add_argument_group("how rows are judged (results/<experiment>/design.json)")
    _add_set(what)
    what.add_argument("--results", type=Path, default=Path("results"), metavar="DIR",
                     help="where results/<experiment>/ goes (default: ./results)")  # fmt: skip
    what.add_argument("--seeds", type=_seeds, metavar="N|LIST",
                     help="N: train each run with N seeds from training.seed on; or a list such as 1,2,3")  # fmt: skip
    what.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="RUN",
        help="train only this run, or each rate of it in a sweep (repeatable, or comma-separated)",
    )
    _add_lr_sweep(what)
    what.add_argument("--fresh", action="store_true",
                     help="start the planned runs over, deleting their earlier results and checkpoints, and "
                     "train what could be reused from another experiment")  # fmt: skip
    what.add_argument("--dry-run", action="store_true", help="print the planned runs and train nothing")
    where.add_argument("--device", choices=["auto", "cpu", "cuda"], default=None,
                     help="auto: every visible GPU, else the CPU (default: training.device of the spec)")  # fmt: skip
    where.add_argument("--gpus-per-run", type=int, default=None, metavar="K",
                     help="GPUs of one run, data-parallel (DDP) when K > 1 (default 1; with Slurm, 0 for a CPU "
                     "spec, 1 for cuda, and for auto 1 where the partition's nodes have GPUs)")  # fmt: skip
    where.add_argument("--runs-per-gpu", type=_runs_per_gpu, default=1, metavar="R",
                     help="R runs share each GPU, one GPU a run: for models too small to keep a GPU busy (with "
                     "NVIDIA's MPS, nvidia-cuda-mps-control -d, their kernels overlap); their speed columns may then "
                     "measure a shared GPU. auto: a probe trains 1, 2, 4, ... copies of the first run at once and "
                     "takes the number with the most steps a second that fits the GPU's memory, starting MPS where "
                     "it is installed (default 1; docs/running.md)")  # fmt: skip
    where.add_argument("--threads-per-run", type=_positive, default=None, metavar="K",
                     help="on the CPU: K threads a run, each run pinned to K cores of its own, as many runs at "
                     "once as the cores allow (default: OMP_NUM_THREADS when it is set; else as many runs at once "
                     "as there are jobs, up to one a core, the cores shared out evenly: one core a run when "
                     "there are as many jobs as cores, which trains the most runs an hour; every core for a "
                     "single run)")  # fmt: skip
    where.add_argument("--tensorboard", type=Path, default=None, metavar="DIR",
                     help="also log curves for TensorBoard under DIR/<experiment>/<run>/seed-<n>")  # fmt: skip
    slurm.add_argument("--launcher", choices=LAUNCHERS, default="local",
                     help="local: worker processes here; slurm: a Slurm job array through submitit; "
                     "submitit-local: submitit's local executor (the slurm path without a cluster)")  # fmt: skip
    slurm.add_argument("--partition", help="Slurm partition (default: slurm.partition of the experiment)")
    slurm.add_argument("--time-min", type=int, metavar="MIN", help="Slurm time limit of one run, in minutes")
    slurm.add_argument("--cpus-per-run", type=int, metavar="N",
                     help="Slurm CPUs of one run (default: what every node of the partition can give)")  # fmt: skip
    slurm.add_argument("--slurm", action="append", default=[], metavar="KEY=VALUE",
                     help="a further sbatch option (repeatable): --slurm account=nlp --slurm qos=high")  # fmt: skip
    slurm.add_argument("--no-wait", action="store_true",
                     help="with slurm: submit and return; run the same command again to collect")  # fmt: skip
    design.add_argument("--margin", type=_margin, metavar="BLEU",
                     help="declare a margin of equivalence over the experiment's `margin:`, before looking: a row "
                     "whose interval lies inside ±BLEU is equivalent (written to results/<experiment>/design.json; "
                     "docs/reports.md)")  # fmt: skip
    design.add_argument("--until-decided", action="store_true",
                     help="train the first seeds, then one more seed for each undecided row (and the baseline where "
                     "it limits them) until every row is better, worse or equivalent, or has --max-seeds; false "
                     "decisions kept at 5%% over all the looks (docs/reports.md)")  # fmt: skip
    design.add_argument("--max-seeds", type=_positive, metavar="N",
                     help="with --until-decided: the most seeds a run may have")  # fmt: skip
    run.set_defaults(handler=cmd_run)

    report = commands.add_parser("report", help="comparison tables, cards and plots rebuilt from results")
    report.add_argument("results_dir", type=Path, metavar="RESULTS_DIR",
                        help="an experiment's directory (results/pe) or a directory of them (results)")  # fmt: skip
    report.add_argument("--format", choices=FORMATS, default="terminal",
                        help="what is printed (or written to --output); default terminal")  # fmt: skip
    report.add_argument("--output", type=Path, metavar="FILE|DIR",
                        help="write the table in --format to FILE (without --format: the format its suffix names, "
                        ".md, .csv, .tex or .html); a directory: the whole report there (a view's, which is never "
                        "written into report/)")  # fmt: skip
    report.add_argument("--sort", metavar="COLUMN", help="sort rows on a column (scores best first)")
    report.add_argument("--reverse", action="store_true", help="reverse the --sort order")
    report.add_argument("--columns", metavar="A,B,...",
                        help="the terminal shows the main columns that fit its width; `all`: every column; "
                        "A,B,...: only these (run always first), and any of the optional ones: grad norm init, "
                        "entropy end, max logit end, logits norm end, BLEU <length bucket>")  # fmt: skip
    report.add_argument("--significance", choices=["bs", "ar", "none"], default="bs",
                        help="paired test of each BLEU against the baseline: bootstrap (default), "
                        "approximate randomisation, none")  # fmt: skip
    report.add_argument("--at", choices=["all", "best-lr"], default="all",
                        help="in a learning-rate sweep: every run at every rate (all, default), or each run at "
                        "its own best rate (best-lr)")  # fmt: skip
    report.add_argument("--at-budget", type=_budget, metavar="N",
                        help="every run as it stood at budget point N (evaluation.budgets)")  # fmt: skip
    report.add_argument("--margin", type=_margin, metavar="BLEU",
                        help="call a row equivalent when its interval lies inside ±BLEU (two one-sided tests), "
                        "instead of the margin the experiment declared (its design.json; docs/reports.md)")  # fmt: skip
    report.add_argument("--no-files", action="store_true",
                        help="do not write <experiment>/report/ (tables, cards, plots, index.html); a view (--margin, "
                        "--at, --at-budget, --columns, --sort, --reverse, --significance) never does")  # fmt: skip
    report.set_defaults(handler=cmd_report)

    check = commands.add_parser(
        "check", help="re-run reference baselines and compare with results/reference/",
        description="Re-runs each reference's first seed and compares it with the numbers kept in "
        "results/reference/ (run from the repository root). A bare `ablate check` checks every measured "
        "reference, each retraining a seed: tens of minutes on 2 cores; `ablate check --list` says what each "
        "costs.")  # fmt: skip
    check.add_argument("references", nargs="*", metavar="REFERENCE",
                       help="names or files under results/reference/ (default: every measured one)")  # fmt: skip
    check.add_argument(
        "--list",
        action="store_true",
        help="list the references, their mode and what a check of each cost where it was measured",
    )
    check.add_argument("--update", action="store_true",
                       help="measure again and rewrite the reference from its source experiment file")  # fmt: skip
    check.add_argument("--keep", type=Path, metavar="DIR", help="keep the runs in DIR (default: a temporary directory)")
    check.add_argument("--threads", type=_positive, metavar="N",
                       help="train with N CPU threads instead of the reference's: round-off as on another CPU, "
                            "judged within seed noise")  # fmt: skip
    check.add_argument("--noise", action="store_true",
                       help="judge within seed noise even on the machine that made the reference "
                            "(default: exactly there, unless the reference says mode: noise)")  # fmt: skip
    check.add_argument("--from-results", type=Path, metavar="DIR",
                       help="with --update: read each seed from a run that finished under DIR with the same spec "
                            "and seed (as `ablate run` reuses runs) and train only the others")  # fmt: skip
    check.set_defaults(handler=cmd_check)

    bench = commands.add_parser(
        "bench", help="time every run of experiment files side by side on this machine: speed.json",
        description="Builds each run's model and batches on this machine and times them interleaved, run after run "
        "and round after round: training updates, greedy and beam decoding, peak memory. No trained weights are "
        "needed. Writes results/<experiment>/speed.json (speed.cuda.json on a GPU), which `ablate report` takes "
        "its speed and memory columns from.")  # fmt: skip
    bench.add_argument("files", nargs="+", metavar="FILE")
    _add_set(bench)
    bench.add_argument("--results", type=Path, default=Path("results"), metavar="DIR",
                       help="where results/<experiment>/ is (default: ./results)")  # fmt: skip
    bench.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="what to time (default cpu)")
    bench.add_argument("--threads", type=_positive, metavar="N",
                       help="CPU threads (default: torch's, every core; a sweep's runs train with one each when "
                       "there are as many runs as cores)")  # fmt: skip
    bench.add_argument("--updates", type=_positive, default=8, metavar="N",
                       help="training updates a run a round, the first of its epoch 0 (default 8)")  # fmt: skip
    bench.add_argument("--sentences", type=int, default=50, metavar="N",
                       help="sentences of the first test split decoded a round, greedily and with beam search; 0: "
                       "no decoding (default 50)")  # fmt: skip
    bench.add_argument("--decode-rounds", type=int, default=3, metavar="N",
                       help="rounds that decode, the first N counted ones: decoding takes most of a round, and "
                       "later rounds time the updates alone, so their ratios narrow sooner (default 3)")  # fmt: skip
    bench.add_argument("--target", type=_fraction, default=0.03, metavar="F",
                       help="stop once every ratio to the baseline has a 95%% interval within ±F "
                       "(default 0.03)")  # fmt: skip
    bench.add_argument("--max-minutes", type=float, default=5.0, metavar="MIN",
                       help="stop an experiment's bench after this long from its start (set-up, memory probes and "
                       "warm-up included), whatever the intervals (default 5)")  # fmt: skip
    bench.add_argument("--max-rounds", type=_positive, default=30, metavar="N", help="at most N rounds (default 30)")
    bench.add_argument("--weights", choices=["initial", "trained"], default="initial",
                       help="initial: each run's seeded initialisation (default); trained: its first seed's last "
                       "checkpoint under --results, to check that speed does not depend on the weights")  # fmt: skip
    bench.set_defaults(handler=cmd_bench)

    validate = commands.add_parser("validate", help="check experiment files and list their runs")
    validate.add_argument("files", nargs="+", metavar="FILE")
    _add_set(validate)
    _add_lr_sweep(validate)
    validate.set_defaults(handler=cmd_validate)

    parts = commands.add_parser("parts", help="list the registered parts of every slot")
    parts.set_defaults(handler=cmd_parts)

    data = commands.add_parser("data", help="corpora: list them, download them, prepare an experiment's once")
    data.add_argument("action", choices=["list", "download", "prepare"],
                      help="prepare FILE...: every corpus the experiment files train on, encoded once into the cache "
                           "and checked (ablate run does it on first use; docs/running.md)")  # fmt: skip
    data.add_argument("corpus", nargs="*", metavar="CORPUS|FILE", help="download: a corpus (default multi30k); "
                      "prepare: experiment files")  # fmt: skip
    data.add_argument("--data-dir", default=None,
                      help="default: $ABLATE_DATA_DIR, else $XDG_CACHE_HOME/ablate/data (~/.cache/...)")  # fmt: skip
    _add_set(data)
    data.set_defaults(handler=cmd_data)

    schema = commands.add_parser("schema", help="print the JSON Schema of experiment files, for editors")
    schema.set_defaults(handler=cmd_schema)
    return parser


def console() -> Console:
    """Rich on a terminal; in a pipe or log, a wide plain console so tables keep one line per row (`ablate report`
    and `check --list` fit theirs to COLUMNS, else 120: ablate.terminal). A closed pipe ends quietly (main)."""
    from ablate.terminal import Screen

    return Screen() if sys.stdout.isatty() else Screen(width=320, no_color=True)


def _add_set(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        dest="overrides",
        help="override a spec key in every run, value parsed as YAML (repeatable): --set model.heads=4",
    )


def _add_lr_sweep(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--lr-sweep", type=_rates, metavar="LR,LR,...",
                        help="train every run at each of these peak learning rates (the schedule's lr), "
                        "over the file's lr_sweep: --lr-sweep 3e-4,1e-3,3e-3")  # fmt: skip


def _rates(value: str) -> list[float]:
    try:
        rates = [float(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected learning rates such as 3e-4,1e-3, got '{value}'") from None
    if not rates or any(not r > 0 for r in rates):
        raise argparse.ArgumentTypeError(f"expected positive learning rates, got '{value}'")
    if len(set(rates)) != len(rates):
        raise argparse.ArgumentTypeError(f"rates repeat: {value}")
    return rates


def cmd_validate(args: argparse.Namespace) -> int:
    from ablate.sweep.experiment import load_experiments
    from ablate.sweep.plan import validation_table

    out = console()
    for experiment in load_experiments(args.files, args.overrides, args.lr_sweep):
        for line in experiment.warnings():
            print(f"warning: {line}", file=sys.stderr)
        out.print(validation_table(experiment))
        out.print(f"  params at the nominal vocabulary size (tokenizer.vocab_size, or merges + 4 specials); all "
                  f"{len(experiment.runs)} runs valid")  # fmt: skip
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from ablate.report.tables import speed_table
    from ablate.sweep.bench import Options, bench
    from ablate.sweep.experiment import load_experiments

    experiments = load_experiments(args.files, args.overrides)
    if args.sentences < 0:
        raise UserError(f"ablate bench: --sentences {args.sentences}: expected 0 or more")
    if args.decode_rounds < 0:
        raise UserError(f"ablate bench: --decode-rounds {args.decode_rounds}: expected 0 or more")
    if not args.max_minutes > 0:  # NaN too
        raise UserError(f"ablate bench: --max-minutes {args.max_minutes:g}: expected a positive number of minutes")
    options = Options(args.device, args.threads, args.updates, args.sentences, args.target,
                      max_rounds=args.max_rounds, max_seconds=args.max_minutes * 60, weights=args.weights,
                      decode_rounds=args.decode_rounds)  # fmt: skip
    out = console()
    for experiment in experiments:
        record, path = bench(experiment, args.results / experiment.name, options, lambda line: print(line, flush=True))
        out.print(speed_table(record))
        out.print(f"  written to {path}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from ablate.train import forkserver

    if args.launcher == "local" and not args.dry_run:
        forkserver.fork_here()  # where it can: the workers' server, before this process reads or computes anything
    try:
        return _run(args)
    finally:
        forkserver.close_unused()


def _run(args: argparse.Namespace) -> int:
    from ablate.sweep import runner
    from ablate.sweep.experiment import load_experiments
    from ablate.sweep.launchers import Interrupted
    from ablate.sweep.specfile import parse_overrides

    experiments = load_experiments(args.files, args.overrides, args.lr_sweep)
    for experiment in experiments:
        for line in experiment.warnings():
            print(f"warning: {line}", file=sys.stderr)
    only = [name for item in args.only for name in item.split(",") if name]
    runner.check_only(experiments, only)
    runner.check_results(args.results)
    if args.tensorboard is not None and importlib.util.find_spec("tensorboard") is None:
        raise UserError("--tensorboard: needs the tensorboard package: pip install 'ablate[tensorboard]'")
    flags = (("partition", args.partition), ("time_min", args.time_min), ("cpus_per_run", args.cpus_per_run),
             ("gpus_per_run", args.gpus_per_run))  # fmt: skip
    slurm = {key: value for key, value in flags if value is not None}
    if args.slurm:
        slurm["additional"] = {k.replace("-", "_"): v for k, v in parse_overrides(args.slurm, "--slurm").items()}
    if args.runs_per_gpu == "auto":
        from ablate.sweep.packing import auto

        args.runs_per_gpu = auto(args.launcher, args.dry_run, args.device, args.gpus_per_run, args.seeds, args.files[0],
                                 args.overrides, experiments, only)  # fmt: skip
    if args.runs_per_gpu > 1 and args.launcher != "local":
        raise UserError(f"--runs-per-gpu {args.runs_per_gpu}: with --launcher local only (Slurm gives a job its GPUs "
                        "whole)")  # fmt: skip
    if args.until_decided != (args.max_seeds is not None):
        raise UserError("ablate run: --until-decided and --max-seeds N go together (the most seeds a run may have)")
    if args.until_decided and (only or args.no_wait):
        raise UserError(f"ablate run: --until-decided judges every row after every look, so it cannot take "
                        f"{'--only' if only else '--no-wait'}")  # fmt: skip
    options = runner.Options(args.results, args.seeds, only, args.fresh, args.device, args.gpus_per_run,
                             args.threads_per_run, args.tensorboard, args.launcher, slurm, not args.no_wait,
                             args.margin, args.max_seeds, args.runs_per_gpu)  # fmt: skip
    if args.dry_run:
        from ablate.sweep.dryrun import dry_run

        return dry_run(experiments, options, console())
    signal.signal(signal.SIGTERM, _stop_like_ctrl_c)
    # Ctrl-C raises KeyboardInterrupt whatever SIGINT's disposition was inherited: a process started in the
    # background of a non-interactive shell (`nohup ablate run ... &`, or a test harness that did) inherits it
    # ignored, and Python then leaves it ignored, so `kill -INT` would not reach the workers.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        if not args.until_decided:
            return runner.run(experiments, options, console())
        from ablate.sweep import sequential

        code = runner.run(experiments, options, console(), sequential.until_decided)
        for experiment in experiments:
            sequential.print_verdicts(experiment, options, console())
        return code
    except Interrupted as stop:
        print(stop, file=sys.stderr)
        return 130


def _stop_like_ctrl_c(signum: int, frame) -> None:
    """SIGTERM (`kill`, a job scheduler) stops a sweep as Ctrl-C does: every worker checkpoints first."""
    raise KeyboardInterrupt


def _runs_per_gpu(value: str) -> int | str:
    return value if value == "auto" else _positive(value)


def _positive(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got '{value}'") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {number}")
    return number


def _fraction(value: str) -> float:
    """A relative width such as 0.03: above 0, below 1."""
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a fraction such as 0.03, got '{value}'") from None
    if not 0 < number < 1:
        raise argparse.ArgumentTypeError(f"expected a fraction between 0 and 1, got {value}")
    return number


def _margin(value: str) -> float:
    """A margin of equivalence in BLEU: a positive number."""
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a margin in BLEU such as 1.0, got '{value}'") from None
    if not 0 < number < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive margin in BLEU, got {value}")
    return number


def _budget(value: str) -> float:
    """A budget point: 2000, 2e6 or 1.5e18 (in the unit of the runs' budget)."""
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a budget point such as 2000 or 1.5e18, got '{value}'") from None
    if not number > 0 or number == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive budget point, got {value}")
    return number


def _seeds(value: str) -> list[int] | int:
    """`--seeds 3` (three seeds from training.seed on) or `--seeds 1,5,9`."""
    try:
        items = [int(v) for v in value.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seeds or a list such as 1,2,3, got '{value}'") from None
    if len(items) == 1:
        if items[0] < 1:
            raise argparse.ArgumentTypeError(f"expected at least 1 seed, got {items[0]}")
        return items[0]
    if len(set(items)) != len(items):
        raise argparse.ArgumentTypeError(f"seeds repeat: {value}")
    return items


def cmd_report(args: argparse.Namespace) -> int:
    from ablate.report.command import ReportOptions, report

    options = ReportOptions(args.significance, args.at, args.columns, args.sort, args.reverse, args.at_budget,
                            args.margin, args.format, args.output, args.no_files)  # fmt: skip
    from ablate.terminal import console as fitted

    return report(args.results_dir, options, fitted())


def cmd_check(args: argparse.Namespace) -> int:
    from ablate.train import forkserver

    if args.from_results is None:
        forkserver.fork_here()  # where it can: the server of the workers that measure, as `ablate run` does
    try:
        from ablate.check.run import check_all, list_references

        if args.list:
            from ablate.terminal import console as fitted

            return list_references(args.references, fitted())
        return check_all(args.references, args.update, args.keep, console(), args.threads, args.noise,
                         args.from_results)  # fmt: skip
    finally:
        forkserver.close_unused()


def cmd_data(args: argparse.Namespace) -> int:
    from ablate.data.corpus import corpus_rows, data_dir, download

    root = data_dir(args.data_dir)
    if args.action == "list":
        table = Table(title=f"Corpora (data directory {root})", title_justify="left")
        for column in ("corpus", "languages", "splits", "description"):
            table.add_column(column)
        for row in corpus_rows():
            table.add_row(*row)
        console().print(table)
        return 0
    if args.action == "prepare":
        from ablate.sweep.experiment import load_experiments
        from ablate.sweep.runner import prepare_experiments

        if not args.corpus:
            raise UserError("ablate data prepare: give the experiment files whose corpora to prepare")
        prepare_experiments(load_experiments(args.corpus, args.overrides), console())
        return 0
    if len(args.corpus) > 1:
        raise UserError(f"ablate data download: one corpus at a time, got {', '.join(args.corpus)}")
    for path in download(args.corpus[0] if args.corpus else "multi30k", root):
        print(f"{path}: ok")
    return 0


def cmd_parts(args: argparse.Namespace) -> int:
    import ablate.train.spec  # noqa: F401 (every slot's built-in parts are declared as the spec imports them)
    from ablate.registry import part_rows

    title = "Registered parts: a spec names one per slot, `slot: part` or `slot: {name: part, param: value}`"
    table = Table(title=title, title_justify="left")
    for column in ("slot", "part", "parameters", "description"):
        table.add_column(column)
    for slot, part, params, description, last in part_rows():
        table.add_row(slot, part, params, description, end_section=last)
    console().print(table)
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    from ablate.sweep.experiment import experiment_schema

    print(json.dumps(experiment_schema(), indent=2))
    return 0


def entry() -> NoReturn:
    """The `ablate` script and `python -m ablate.cli`: main's exit code, without tearing down what it imported."""
    exit_at_once(main())


if __name__ == "__main__":
    entry()
