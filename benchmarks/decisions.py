"""The verdicts' error rates and seeds, simulated: `ablate run --until-decided`'s sequential design against a fixed
design of as many seeds a run as its cap (issue 39; the table in docs/reports.md).

Each simulated experiment has a baseline and one row for each true ΔBLEU; a seed's BLEU is its run's true BLEU
plus normal seed noise (--sd, the seed-to-seed sd of BLEU: the committed results span about 0.1 to 1.1), and
each row's ΔBLEU has one test-set error (--test-sd: the paired bootstrap's sd of a mean ΔBLEU on test2016 was
0.26 to 0.48 in the committed results). ablate.report.decide.simulate judges them as the report does.

    python benchmarks/decisions.py                       # margin 1, seeds 3 to 5, sd 0.1 0.3 0.6 1.1
    python benchmarks/decisions.py --margin 0.5 --experiments 4000

No torch; about a minute on 2 cores.
"""

from __future__ import annotations

import argparse

from ablate.report.decide import Design, simulate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--margin", type=float, default=1.0, help="the margin of equivalence, BLEU (default 1)")
    parser.add_argument("--first", type=int, default=3, help="the seeds every run starts with (default 3)")
    parser.add_argument("--max-seeds", type=int, default=5, help="the cap, and the fixed design's seeds (default 5)")
    parser.add_argument("--sd", type=float, nargs="+", default=[0.1, 0.3, 0.6, 1.1], help="seed-to-seed sds")
    parser.add_argument("--test-sd", type=float, default=0.3, help="the test-set sd of a ΔBLEU (default 0.3)")
    parser.add_argument("--experiments", type=int, default=2000, help="simulated experiments a cell (default 2000)")
    args = parser.parse_args()

    m = args.margin
    deltas = [0.0, m, -m, 2 * m, -2 * m, 3 * m]
    designs = {
        f"sequential {args.first}→{args.max_seeds}": Design(margin=m, first=args.first, max_seeds=args.max_seeds),
        f"fixed {args.max_seeds}": Design(margin=m, first=args.max_seeds, max_seeds=args.max_seeds),
    }
    true = ", ".join(f"{d:+g}" for d in deltas)
    print(f"margin ±{m:g} BLEU, α 0.05, test-set sd {args.test_sd:g}, {args.experiments} experiments a cell; "
          f"a baseline and {len(deltas)} rows in each (true ΔBLEU {true})\n")  # fmt: skip
    print("| seed sd | design | true ΔBLEU | better | worse | equivalent | undecided | seeds of the row "
          "| seeds of the experiment | any false verdict in the experiment |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|")
    for sd in args.sd:
        for name, design in designs.items():
            rows, total, any_false = simulate(design, deltas, sd, args.test_sd, experiments=args.experiments)
            for row in rows:
                print(f"| {sd:g} | {name} | {row.delta:+g} | {row.better:.1%} | {row.worse:.1%} | "
                      f"{row.equivalent:.1%} | {row.undecided:.1%} | {row.seeds:.2f} | {total:.1f} | "
                      f"{any_false:.1%} |")  # fmt: skip


if __name__ == "__main__":
    main()
