"""Runs' test BLEU as fairseq's generate.py --remove-bpe scores it (its own BLEU-4, not --sacrebleu), beside the BLEU
their result.json holds: hypotheses and references lowercased, punctuation-normalised and Moses-tokenised with
tokenizer.perl's escaping, as Multi30k's tok files and Wu et al.'s text are, then counted at spaces (sacreBLEU's
tokenize none, which counts as fairseq's scorer does). How far the detokenised, sacreBLEU-scored number of a run is
from the tokenised number a paper of that era reports.

    ABLATE_DATA_DIR=/path/to/corpora python scripts/tokenised_bleu.py results/transformer-tiny-8192/runs/baseline/seed-*

One line a run and test split: the run, the split, result.json's BLEU and signature, the tokenised BLEU and the
reference length in tokens (12,103 on test2016 en-de, as the authors' logs give it).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sacrebleu.metrics import BLEU

from ablate.data.corpus import CORPUS, data_dir
from ablate.data.preprocess import prepare_side
from ablate.data.spec import DataSpec
from ablate.errors import UserError
from ablate.rundir import read_config, read_hypotheses, read_result

AS_MULTI30K_TOK = DataSpec(lowercase=True, tokenize={"name": "moses", "normalize": True, "escape": True})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run directories (<experiment>/runs/<run>/seed-<n>)")
    args = parser.parse_args(argv)
    for directory in args.runs:
        result, config = read_result(directory), read_config(directory)
        if result is None or not result.scores:
            print(f"{directory}: no scored result.json", file=sys.stderr)
            return 1
        data = DataSpec.model_validate(config["data"])
        corpus = CORPUS.build(data.corpus, root=data_dir(data.data_dir))
        for split, score in result.scores.items():
            hypotheses = read_hypotheses(directory, split)
            if hypotheses is None:
                print(f"{directory}: no hypotheses/{split}.txt", file=sys.stderr)
                return 1
            references = [pair[1] for pair in corpus.read(split, data.source, data.target)]
            tokenised = [prepare_side(texts, data.target, AS_MULTI30K_TOK) for texts in (hypotheses, references)]
            bleu = BLEU(tokenize="none", force=True).corpus_score(tokenised[0], [tokenised[1]])
            print(f"{directory}  {split}  {score.bleu:.2f} ({score.bleu_signature})  tokenised {bleu.score:.2f}  "
                  f"reference length {bleu.ref_len:,}")  # fmt: skip
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except UserError as error:
        sys.exit(f"tokenised_bleu: {error}")
