"""The `ablate` command: thin subcommands that parse arguments and hand over to the library."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.table import Table

from ablate.errors import SpecError, UserError


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="ablate", description="Architecture ablations of the translation Transformer."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = commands.add_parser("run", help="train and evaluate every run of experiment files")
    run.add_argument("files", nargs="+", metavar="FILE")
    _add_set(run)
    run.add_argument(
        "--results",
        type=Path,
        default=Path("results"),
        metavar="DIR",
        help="where results/<experiment>/ goes (default: ./results)",
    )
    run.set_defaults(handler=cmd_run)

    validate = commands.add_parser("validate", help="check experiment files and list their runs")
    validate.add_argument("files", nargs="+", metavar="FILE")
    _add_set(validate)
    validate.set_defaults(handler=cmd_validate)

    parts = commands.add_parser("parts", help="list the registered parts of every slot")
    parts.set_defaults(handler=cmd_parts)

    data = commands.add_parser("data", help="corpora: list them, download them")
    data.add_argument("action", choices=["list", "download"])
    data.add_argument("corpus", nargs="?", default="multi30k")
    data.add_argument("--data-dir", default=None, help="default: $ABLATE_DATA_DIR or ~/.cache/ablate/data")
    data.set_defaults(handler=cmd_data)

    schema = commands.add_parser("schema", help="print the JSON Schema of experiment files, for editors")
    schema.set_defaults(handler=cmd_schema)

    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except UserError as error:
        for line in error.lines:
            print(line, file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def console() -> Console:
    """Rich on a terminal; in a pipe or log, a wide plain console so tables keep one line per row."""
    return Console() if sys.stdout.isatty() else Console(width=200, no_color=True)


def _add_set(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        dest="overrides",
        help="override a spec key in every run, value parsed as YAML (repeatable): --set model.heads=4",
    )


def _load_all(files: Sequence[str], overrides: Sequence[str]):
    from ablate.experiment import load_experiment

    experiments, errors = [], []
    for file in files:
        try:
            experiments.append(load_experiment(file, overrides))
        except SpecError as error:
            errors.append(error)
    if errors:
        raise SpecError.merge(errors)
    return experiments


def cmd_validate(args: argparse.Namespace) -> int:
    from ablate.model import parameter_count

    out = console()
    for experiment in _load_all(args.files, args.overrides):
        table = Table(title=f"{experiment.path}: {experiment.name} ({len(experiment.runs)} runs)", title_justify="left")
        table.add_column("run")
        table.add_column("differs from the baseline")
        table.add_column("params", justify="right")
        for run in experiment.runs:
            vocab = run.spec.tokenizer.vocab_size
            table.add_row(run.name, run.describe(), f"{parameter_count(run.spec.model, vocab, vocab):,}")
        out.print(table)
        out.print(
            f"  params at the nominal vocabulary size of tokenizer.vocab_size; all {len(experiment.runs)} runs valid"
        )
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from ablate.progress import Reporter
    from ablate.runner import run_experiment
    from ablate.summary import summary_frame

    experiments = _load_all(args.files, args.overrides)
    out = console()
    failed = []
    for experiment in experiments:
        out.print(
            f"{experiment.path}: {experiment.name}, {len(experiment.runs)} runs -> {args.results / experiment.name}"
        )
        rows = run_experiment(experiment, args.results, Reporter(out))
        print_table(out, f"{experiment.name}: {experiment.description}", summary_frame(rows))
        out.print(f"written: {args.results / experiment.name / 'summary.md'} and summary.csv")
        failed += [f"{experiment.name}/{r['run']}: {r.get('error', '')}" for r in rows if r["status"] == "failed"]
    if failed:
        print("failed runs:\n  " + "\n  ".join(failed), file=sys.stderr)
        return 1
    return 0


def print_table(out: Console, title: str, frame) -> None:
    table = Table(title=title, title_justify="left")
    for column in frame.columns:
        table.add_column(column, justify="left" if column in ("run", "differs", "status") else "right")
    for row in frame.astype(object).itertuples(index=False):
        table.add_row(*["-" if v is None or v != v else f"{v:,}" if isinstance(v, int) else str(v) for v in row])
    out.print(table)


def cmd_data(args: argparse.Namespace) -> int:
    from ablate.data.corpus import CORPUS, data_dir

    root = data_dir(args.data_dir)
    if args.action == "list":
        table = Table(title=f"Corpora (data directory {root})", title_justify="left")
        for column in ("corpus", "languages", "splits", "description"):
            table.add_column(column)
        for corpus in CORPUS:
            languages = ", ".join(getattr(corpus, "LANGUAGES", ["(per spec)"]))
            splits = ", ".join(getattr(corpus, "SPLITS", ["(per spec)"]))
            table.add_row(corpus.name, languages, splits, corpus.description())
        console().print(table)
        return 0
    corpus = CORPUS.build(CORPUS.parse(args.corpus), root=root)
    if not hasattr(corpus, "files"):
        raise UserError(f"corpus '{args.corpus}' is read from your own files; there is nothing to download")
    for name in corpus.files():
        split, language, _ = name.split(".")
        path = corpus.path(split, language)  # downloads what is missing and checks every checksum
        print(f"{path}: ok")
    return 0


def cmd_parts(args: argparse.Namespace) -> int:
    from ablate.registry import REGISTRY

    table = Table(
        title="Registered parts: a spec names one per slot, `slot: part` or `slot: {name: part, param: value}`",
        title_justify="left",
    )
    table.add_column("slot")
    table.add_column("part")
    table.add_column("parameters")
    table.add_column("description")
    for slot in REGISTRY.values():
        for i, part in enumerate(slot):
            params = ", ".join(f"{name}={field.default}" for name, field in part.Params.model_fields.items())
            table.add_row(
                slot.name if i == 0 else "",
                part.name,
                params or "-",
                part.description(),
                end_section=i == len(slot.parts) - 1,
            )
    console().print(table)
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    from ablate.experiment import experiment_schema

    print(json.dumps(experiment_schema(), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
