"""The critical batch of a plain torch model (an MLP, not a transformer) with its own loss, its own data
and a metric from ``compute_metrics``, through cbs-ray's Python API.

    python examples/plain_torch.py                         # ≈ 20 s on a 2-core CPU, offline
    python examples/plain_torch.py --set resources.workers_per_trial=2   # each trial on 2 gloo workers

What a pipeline passes (HF Trainer's names): ``model_init`` builds a fresh ``MLP`` whose forward returns
``{"loss": …, "logits": …}`` (the loss a mean over the batch's examples); the datasets are map-style torch
``Dataset``s of (features, label) tuples, which ``collate`` turns into the model's keyword arguments;
``compute_metrics`` scores the gathered logits. The spec holds only the search: budget, batch sizes,
trials, resources.
"""

from __future__ import annotations

import argparse

import torch
from torch import nn

from cbs_ray import load_spec, run_search

DIM, CLASSES = 16, 4


class Blobs(torch.utils.data.Dataset):
    """Points around ``CLASSES`` fixed centres in R^DIM (the same centres for every split), labelled by
    their centre. The clouds overlap (``spread``), so accuracy tops out near 0.9 and the batch size shows."""

    def __init__(self, size: int, *, seed: int, spread: float = 1.6):
        centres = torch.randn(CLASSES, DIM, generator=torch.Generator().manual_seed(0))
        g = torch.Generator().manual_seed(seed)
        self.labels = torch.randint(0, CLASSES, (size,), generator=g)
        self.features = centres[self.labels] + spread * torch.randn(size, DIM, generator=g)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.features[i], self.labels[i]


class MLP(nn.Module):
    """Two hidden layers; the loss is its own: cross-entropy, the mean over the batch's examples."""

    def __init__(self, hidden: int = 64):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(DIM, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, CLASSES))

    def forward(self, features: torch.Tensor, labels: torch.Tensor | None = None) -> dict:
        logits = self.net(features)
        loss = nn.functional.cross_entropy(logits, labels) if labels is not None else None
        return {"loss": loss, "logits": logits}


def collate(items: list[tuple[torch.Tensor, torch.Tensor]]) -> dict:
    """(features, label) tuples -> the model's keyword arguments."""
    return {"features": torch.stack([x for x, _ in items]), "labels": torch.stack([y for _, y in items])}


def compute_metrics(prediction) -> dict:
    """Accuracy (the search's metric) and the worst class's recall, from the gathered logits."""
    predicted = prediction.predictions.argmax(-1)
    labels = prediction.label_ids
    recalls = [(predicted[labels == c] == c).mean() for c in range(CLASSES) if (labels == c).any()]
    return {"accuracy": float((predicted == labels).mean()), "worst_class_recall": float(min(recalls))}


def objects(train_examples: int = 8192, eval_examples: int = 16384) -> dict:
    """What a pipeline passes to ``run_search``: the model, the data and the metric."""
    return {"model_init": MLP, "train_dataset": Blobs(train_examples, seed=1),
            "eval_dataset": Blobs(eval_examples, seed=2), "data_collator": collate,
            "compute_metrics": compute_metrics}


SEARCH = ["name=plain-torch-mlp",
          "search.batch_sizes=[16, 32, 64, 128, 256, 512]",
          "search.num_trials=12",                  # two per batch size
          "training.base_lr=0.003",                # AdamW at B0=16 for a small MLP
          "training.budget_samples=4096",          # the same 4096 samples for every batch size
          "training.eval_every_samples=1024",
          "asha.grace_period_samples=1024"]


def search_spec(overrides=()):
    """The search: only budget, batch sizes, trials and resources (no model or data sections)."""
    return load_spec(None, SEARCH + list(overrides))


def main(argv: list[str] | None = None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--output", help="where the report goes (default ./cbs_results/plain-torch-mlp)")
    args = parser.parse_args(argv)
    result = run_search(search_spec(args.overrides), output_dir=args.output, **objects())
    print(f"the MLP: {result.answer.text}")  # the answer with its bound ("≤ 16", "≥ 128"), not the bare number
    return result


if __name__ == "__main__":
    main()
