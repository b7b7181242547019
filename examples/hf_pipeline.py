"""The critical batch of a Hugging Face pipeline's own model and data: a ``datasets.Dataset`` it tokenized
itself and a BERT it builds in ``model_init``, scored by its own ``compute_metrics``, through cbs-ray's
Python API.

    python examples/hf_pipeline.py                          # ≈ 1 min on a 2-core CPU, offline
    python examples/hf_pipeline.py --set resources.workers_per_trial=2   # each trial on 2 gloo workers

Nothing is downloaded: the text is generated here (weather reports, labelled by whether warm words
outnumber cold ones, 5 % of labels flipped) and the tokenizer is a word-level one trained on it locally,
wrapped as a ``PreTrainedTokenizerFast`` like any hub tokenizer. Everything after that is what a pipeline
with a hub model and dataset would do: ``Dataset.map`` to tokenize, torch format, ``model_init`` returning
a fresh ``BertForSequenceClassification`` (whose output has ``loss`` and ``logits``), HF's default
collator, and ``compute_metrics`` on an ``EvalPrediction``.
"""

from __future__ import annotations

import argparse
import functools
import random

from cbs_ray import load_spec, run_search

WARM = "hot warm sunny balmy mild humid scorching sweltering bright tropical".split()
COLD = "cold chilly icy freezing frosty snowy bleak wintry bitter grey".split()
FILLER = ("today tomorrow morning evening in the north south coast hills city expect a spell of with "
          "winds later and skies over most areas then turning").split()
MAX_LENGTH = 24


def weather_reports(count: int, *, seed: int) -> tuple[list[str], list[int]]:
    """``count`` generated reports and their labels: 1 when warm words outnumber cold ones (one or three
    of them per report), then 5 % of the labels flipped."""
    rng = random.Random(seed)
    texts, labels = [], []
    for _ in range(count):
        words = [rng.choice(FILLER) for _ in range(rng.randint(4, 12))]
        warm = 0
        mentions = rng.choice((1, 3))
        for _ in range(mentions):
            is_warm = rng.random() < 0.5
            warm += is_warm
            words.insert(rng.randint(0, len(words)), rng.choice(WARM if is_warm else COLD))
        label = int(2 * warm > mentions)
        texts.append(" ".join(words))
        labels.append(1 - label if rng.random() < 0.05 else label)
    return texts, labels


def train_tokenizer(texts: list[str]):
    """A word-level tokenizer trained on ``texts``, as a transformers tokenizer ([CLS] text [SEP])."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(texts, trainers.WordLevelTrainer(special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]"]))
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", tok.token_to_id("[CLS]")), ("[SEP]", tok.token_to_id("[SEP]"))])
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]",
                                   sep_token="[SEP]")


def tokenized(texts: list[str], labels: list[int], tokenizer):
    """A ``datasets.Dataset`` of input_ids, attention_mask and label, in torch format."""
    import datasets

    ds = datasets.Dataset.from_dict({"text": texts, "label": labels})
    ds = ds.map(lambda batch: tokenizer(batch["text"], padding="max_length", truncation=True, max_length=MAX_LENGTH),
                batched=True, remove_columns=["text"])
    return ds.with_format("torch", columns=["input_ids", "attention_mask", "label"])


def make_model(vocab_size: int):
    """A fresh 2-layer, 64-wide BERT classifier from its config (random weights, no download)."""
    from transformers import BertConfig, BertForSequenceClassification

    return BertForSequenceClassification(BertConfig(
        vocab_size=vocab_size, hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128,
        max_position_embeddings=MAX_LENGTH, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, num_labels=2))


def compute_metrics(prediction) -> dict:
    """Accuracy from the ``EvalPrediction`` of the whole eval set."""
    return {"accuracy": float((prediction.predictions.argmax(-1) == prediction.label_ids).mean())}


def objects(train_examples: int = 8192, eval_examples: int = 4096) -> dict:
    """What the pipeline passes to ``run_search``: its model (a function that builds a fresh one), its
    tokenized datasets and its metric; HF's default collator batches the rows."""
    train_texts, train_labels = weather_reports(train_examples, seed=1)
    tokenizer = train_tokenizer(train_texts)
    return {"model_init": functools.partial(make_model, vocab_size=len(tokenizer)),
            "train_dataset": tokenized(train_texts, train_labels, tokenizer),
            "eval_dataset": tokenized(*weather_reports(eval_examples, seed=2), tokenizer),
            "compute_metrics": compute_metrics}


SEARCH = ["name=hf-pipeline-bert",
          "search.batch_sizes=[32, 64, 128, 256, 512]",
          "search.num_trials=10",                  # two per batch size
          "training.base_lr=0.001",                # AdamW at B0=16 for a tiny BERT from scratch
          "training.budget_samples=6144",          # the same samples for every batch size
          "training.eval_every_samples=1536",
          "asha.grace_period_samples=1536"]


def search_spec(overrides=()):
    """The search: only budget, batch sizes, trials and resources (no model or data sections)."""
    return load_spec(None, SEARCH + list(overrides))


def main(argv: list[str] | None = None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--output", help="where the report goes (default ./cbs_results/hf-pipeline-bert)")
    args = parser.parse_args(argv)
    result = run_search(search_spec(args.overrides), output_dir=args.output, **objects())
    print(f"the pipeline's BERT: {result.answer.text}")  # the answer with its bound ("≥ 128"), not the bare number
    return result


if __name__ == "__main__":
    main()
