"""The search spec: typed, documented, validated once at the edge.

A spec is a YAML file whose nested maps correspond one-to-one to the dataclasses below; every field has a
docstring and carries its unit in its name. ``SearchSpec()`` with no arguments *is* the embedded default:
a tiny BERT trained from its config on the built-in offline sentiment task, sized to finish on a 2-core
CPU in minutes. Loading never starts Ray and never touches the network; a bad spec raises ``SpecError``
whose message names the field (``training.budget_samples: must be ...``).

A field's own checks are declared beside it (``vocab_size: int = field(default=2000,
metadata=check(at_least(10)))``); the rules that relate fields are named functions (``_one_budget``,
``_grace_period_fits_budget``, ...) that ``validate`` applies in order.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
import os
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, Optional

import yaml

__all__ = ["SpecError", "SearchSpec", "ModelSpec", "DataSpec", "TrainingSpec", "SearchParams",
           "GenerationSpec", "AshaSpec", "BranchSpec", "ResourcesSpec", "load_spec", "spec_from_dict", "spec_to_dict", "apply_overrides"]


class SpecError(ValueError):
    """A spec that cannot run; the message names the offending field."""


TINY_BERT = {
    "model_type": "bert",
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 128,
    "max_position_embeddings": 64,
    "hidden_dropout_prob": 0.0,  # tiny model, short budget: dropout only slows learning
    "attention_probs_dropout_prob": 0.0,
}


# ---- single-field checks, declared beside their fields ---------------------------------------------

@dataclass(frozen=True)
class Check:
    """A rule on one field's own value, declared beside the field as ``field(..., metadata=check(...))``
    and applied by ``validate``. ``says`` is the message after ``<field>: ``, formatted with ``value``.
    A None in an Optional field is never checked (None means "not set")."""
    ok: Callable[[Any], bool]
    says: str

    def __call__(self, value: Any, path: str) -> None:
        if not self.ok(value):
            raise SpecError(f"{path}: {self.says.format(value=value)}")


def check(*checks: Check) -> dict:
    """Field metadata declaring ``checks``, applied in order; the first that fails is the error."""
    return {"checks": checks}


def _got(show_value: bool) -> str:
    return ", got {value}" if show_value else ""


def positive(says: str = "must be positive", *, show_value: bool = True) -> Check:
    return Check(lambda v: v > 0, says + _got(show_value))


def at_least(low: int, *, show_value: bool = True) -> Check:
    return Check(lambda v: v >= low, f"must be at least {low}" + _got(show_value))


def non_negative() -> Check:
    return Check(lambda v: v >= 0, "must be >= 0, got {value}")


def greater_than(low: float) -> Check:
    return Check(lambda v: v > low, f"must be greater than {low}, got {{value}}")


def within(low: float, high: float, *, ends: str) -> Check:
    """``low``..``high`` with ``ends`` as written in the message: ``"[)"`` includes low and excludes high."""
    above = (lambda v: v >= low) if ends[0] == "[" else (lambda v: v > low)
    below = (lambda v: v <= high) if ends[1] == "]" else (lambda v: v < high)
    return Check(lambda v: above(v) and below(v), f"must be in {ends[0]}{low}, {high}{ends[1]}, got {{value}}")


def low_high_pair() -> Check:
    """A ``[low, high]`` list of two numbers."""
    def ok(v):
        return len(v) == 2 and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v)
    return Check(ok, "expected [low, high], got {value!r}")


def ordered_within(low: float, high: float) -> Check:
    """A ``[low, high]`` pair (see ``low_high_pair``) with low <= high, both within [``low``, ``high``]."""
    return Check(lambda v: low <= v[0] <= v[1] <= high,
                 f"must satisfy {low} <= low <= high <= {high}, got {{value!r}}")


DIRECTORY_NAME = Check(lambda v: bool(v) and not any(c in v for c in "/\\ "),
                       "must be a non-empty name without spaces or slashes, got {value!r}")
HAS_MODEL_TYPE = Check(lambda c: "model_type" in c, "must contain model_type (e.g. bert, gpt2)")
BUILTIN_METRICS = ("accuracy", "eval_loss", "perplexity", "bleu")
"""The metrics the spec path computes; ``search.metric`` may name another only with ``compute_metrics``."""
METRIC_NAME = Check(lambda v: bool(v) and v.replace("_", "").replace("-", "").isalnum(),
                    "must be a metric's name (accuracy, eval_loss, perplexity, bleu, or a key compute_metrics "
                    "returns), got {value!r}")
POSITIVE_NUMBER = Check(lambda v: v > 0 and math.isfinite(v), "must be a positive number, got {value}")


@dataclass
class ModelSpec:
    name: Optional[str] = None
    """Hugging Face hub name or local directory of a pretrained model (e.g. ``bert-base-uncased``).
    Exactly one of ``name`` and ``config`` is set."""
    config: Optional[dict] = field(default_factory=lambda: dict(TINY_BERT), metadata=check(HAS_MODEL_TYPE))
    """Hugging Face config keys for a model trained from scratch; must contain ``model_type``."""
    tokenizer: Optional[str] = None
    """Hub name or local path of a tokenizer. Default: the model's own tokenizer for ``name``; for
    ``config``, a word-level tokenizer trained locally on the training text."""
    vocab_size: int = field(default=2000, metadata=check(at_least(10)))
    """Vocabulary size of the locally trained tokenizer (ignored when a tokenizer is loaded)."""


@dataclass
class DataSpec:
    source: Literal["builtin", "hub", "files"] = "builtin"
    """Where the text comes from: the built-in offline task, ``load_dataset`` from the hub, or local files."""
    builtin_task: Literal["sentiment", "translation"] = "sentiment"
    """The built-in task: ``sentiment``, generated sentences whose label is whether positive words outnumber
    negative ones, with 5 % label noise; or ``translation`` (``task: seq2seq`` only), word sequences mapped
    to a made-up language through a fixed dictionary, each adjective moved behind its noun (no download;
    see ``cbs_ray.data``)."""
    builtin_negation: float = field(default=0.0, metadata=check(within(0, 1, ends="[]")))
    """The built-in task's chance that a sentiment word is negated by "not" (which flips it). 0 by default:
    a tiny model learns negation as a sudden jump whose timing varies from seed to seed by more than a
    factor 2 of steps, which makes the critical batch a coin toss; 0.2 is the harder task of earlier
    versions."""
    builtin_train_examples: int = field(default=8192, metadata=check(positive(show_value=False)))
    """Size of the generated training set."""
    builtin_eval_examples: int = field(default=24576, metadata=check(positive(show_value=False)))
    """Size of the generated evaluation set. The default keeps an accuracy's standard error at most 0.0032
    even at chance (0.5), so one batch size that failed to learn cannot make the verdict unresolvable."""
    hub_name: Optional[str] = None
    """``datasets.load_dataset`` name, e.g. ``glue``."""
    hub_config: Optional[str] = None
    """``load_dataset`` config name, e.g. ``sst2``."""
    train_split: str = "train"
    """Split used for training (hub source)."""
    eval_split: str = "validation"
    """Split used for evaluation (hub source)."""
    train_file: Optional[str] = None
    """Local training file: .csv, .tsv, .json/.jsonl or .parquet."""
    eval_file: Optional[str] = None
    """Local evaluation file, same format."""
    text_column: str = "sentence"
    """Column holding the text."""
    eval_text_column: Optional[str] = None
    """Column holding the text in the evaluation set, where it is named differently (None: ``text_column``)."""
    label_column: str = "label"
    """Column holding integer class labels (sequence-classification only)."""
    target_column: str = "target"
    """Column holding the target text (seq2seq only): what the decoder learns to write for ``text_column``."""
    max_seq_length: int = field(default=16, metadata=check(at_least(4)))
    """Tokens per example after truncation/padding (the built-in task's longest sentence is 13 words:
    16 holds it with [CLS] and [SEP]). For seq2seq: the source's tokens."""
    max_target_length: int = field(default=16, metadata=check(at_least(2)))
    """Seq2seq only: target tokens per example after truncation/padding, the end-of-sequence token
    included (the built-in translation's longest target is 7 words)."""
    max_train_examples: Optional[int] = field(default=None, metadata=check(positive(show_value=False)))
    """Use only the first N training examples (None: all)."""
    max_eval_examples: Optional[int] = field(default=None, metadata=check(positive(show_value=False)))
    """Use only the first N examples of the eval file/split (None: all). With ``holdout_examples`` that is
    the dev set; the held-out set the search selects on is sized by ``holdout_examples`` alone."""
    holdout_examples: Optional[int] = field(default=None, metadata=check(positive(show_value=False)))
    """Hold N training examples out (a fixed random sample, never trained on) as the set the search
    selects on; the eval file/split then becomes the dev set, evaluated at the end of each trial and
    reported as ``dev_<metric>``. For dev sets whose sampling noise is as large as the differences between
    batch sizes (SST-2's 872 sentences: about 1.4 accuracy points of standard error). None: select on the
    eval file/split."""
    packing: Optional[bool] = None
    """Causal LM only: concatenate the tokenized texts (each followed by the tokenizer's EOS, or ending in the
    word-level tokenizer's [SEP]) and cut the stream into blocks of exactly ``max_seq_length`` tokens, as
    pretraining does; the last partial block is dropped. No padding is trained on and every sample is
    ``max_seq_length`` tokens, so an equal-sample budget is an equal-token budget. The training set's size is
    then its number of blocks. None: on with ``training.budget_tokens``, else off."""


@dataclass
class TrainingSpec:
    budget_samples: Optional[int] = 7168
    """Equal-sample budget: every trial trains on exactly this many samples, whatever its batch size. The
    default: batch sizes up to 128 (56 steps or more) reach the built-in task's ~0.95 ceiling, 256 (28
    steps) and 512 (14) fall short."""
    budget_epochs: Optional[float] = field(default=None, metadata=check(positive()))
    """Alternative to ``budget_samples``: epochs over the training set, rounded down to a whole number of
    ``eval_every_samples``. Set ``budget_samples: null`` to use it."""
    budget_tokens: Optional[int] = field(default=None, metadata=check(positive()))
    """Alternative to ``budget_samples`` for ``task: causal-lm``: every trial trains on this many tokens, as
    pretraining budgets are counted. The texts are packed (``data.packing``), so every sample is
    ``data.max_seq_length`` tokens and the budget is ``budget_tokens // max_seq_length`` samples, rounded down
    to a whole number of ``eval_every_samples`` (the plan prints the tokens actually trained). Set
    ``budget_samples: null`` to use it."""
    base_lr: float = field(default=5.0e-4, metadata=check(POSITIVE_NUMBER))
    """Learning rate tuned at ``base_batch`` (B0); trials use base_lr · (B / B0) ** alpha."""
    base_batch: int = field(default=16, metadata=check(positive()))
    """B0: the batch size at which ``base_lr`` is right."""
    lr_decay: Literal["linear", "cosine", "constant"] = "linear"
    """Shape of the LR after warmup, reaching 0 at the end of the budget (except constant)."""
    optimizer: Literal["adamw", "lamb", "sgd"] = "adamw"
    """Optimizer: AdamW, LAMB (layer-wise trust ratio for large batches, You et al. 2020, from
    ``pytorch_optimizer``), both with betas ``adam_beta1``/``adam_beta2``, or SGD with momentum 0.9."""
    adam_beta1: float = field(default=0.9, metadata=check(within(0, 1, ends="[)")))
    """AdamW's and LAMB's first-moment decay (the same for every batch size)."""
    adam_beta2: float = field(default=0.999, metadata=check(within(0, 1, ends="[)")))
    """AdamW's and LAMB's second-moment decay, the same for every batch size. Small batches may want a
    larger one (Marek et al. 2025), which a search at one value can mistake for a batch-size effect."""
    label_smoothing: float = field(default=0.0, metadata=check(within(0, 1, ends="[)")))
    """Label smoothing of the training loss (0 = none); evaluation is never smoothed."""
    layer_lr_decay: float = field(default=1.0, metadata=check(within(0, 1, ends="(]")))
    """Layer-wise LR decay: encoder layer i of L trains at lr · decay^(L − i), embeddings at
    lr · decay^(L + 1), the head at lr (1.0 = off)."""
    precision: Literal["fp32", "bf16", "fp16", "auto"] = "fp32"
    """Autocast precision: bf16, fp16 (with a gradient scaler), or auto (bf16 where the GPU supports it,
    else fp16; fp32 on CPU). Autocast keeps LayerNorm and softmax in fp32."""
    gradient_checkpointing: bool = False
    """Recompute activations in backward through the HF model's own switch (less memory, ~30 % slower)."""
    compile: bool = False
    """``torch.compile`` the model for training and evaluation. The first report interval includes the
    compilation (tens of seconds); on an H200, BERT-base bf16 ran 7 % faster compiled (BENCHMARKS.md)."""
    compile_mode: Literal["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"] = "default"
    """``torch.compile``'s mode (reduce-overhead and max-autotune use CUDA graphs on a GPU)."""
    dataloader_workers: Optional[int] = field(default=None, metadata=check(non_negative()))
    """DataLoader worker processes (None: 2 on a GPU, so batches are ready while the device trains; 0 on a
    CPU, whose cores the trial's training uses)."""
    pin_memory: Optional[bool] = None
    """Page-locked host batches, copied to the GPU faster (None: on when ``resources.use_gpu``)."""
    persistent_workers: Optional[bool] = None
    """Keep the DataLoader's workers alive from one epoch to the next (None: whenever there are
    workers); needs DataLoader workers."""
    weight_decay: float = field(default=0.01, metadata=check(non_negative()))
    """Decoupled weight decay (not applied to biases and LayerNorm weights)."""
    grad_clip_norm: Optional[float] = field(default=1.0, metadata=check(positive("must be positive or null")))
    """Clip the global gradient norm to this value (None: no clipping)."""
    divergence_factor: float = field(default=10.0, metadata=check(greater_than(1)))
    """A trial is stopped as diverged when a report interval's mean training loss exceeds this multiple
    of its first step's loss (besides any NaN/Inf loss or gradient norm)."""
    eval_every_samples: int = 1024
    """Report cadence: evaluate, report and checkpoint every this many samples. Must be a multiple of the
    largest batch size so every report lands on an exact sample milestone."""
    micro_batch_size: Optional[int] = field(default=32, metadata=check(positive()))
    """Cap on the per-worker micro-batch; larger batches use gradient accumulation (None: no cap). The
    default 32 also lets a single worker measure the gradient noise scale at B >= 64."""
    probe_micro_batch: bool = False
    """On GPU, find the largest per-worker micro-batch that fits (forward + backward + optimizer step at
    growing sizes, 10 % safety margin, minimum across workers, cached in ~/.cache/cbs_ray/) and use it as
    the cap, accumulating the rest. On CPU only with ``memory_limit_gb``, else skipped."""
    eval_batch_size: int = field(default=256, metadata=check(at_least(1)))
    """Evaluation batch per worker. Lowered to the probed micro-batch where memory bounded the probe (a
    forward without gradients needs less memory than a training step of the same size)."""
    memory_limit_gb: Optional[float] = field(default=None, metadata=check(positive("must be positive or null")))
    """CPU workers: the resident memory (GiB) a worker process may peak at during a training step. With
    ``probe_micro_batch`` the probe plans the micro-batch within it (a CPU has no out-of-memory error to
    catch: sizes expected to exceed it are not run). Ignored on a GPU, whose memory is the limit."""
    noise_scale: bool = True
    """Estimate the gradient noise scale B_simple during training (McCandlish et al. 2018): needs more
    than one worker or gradient accumulation; costs one sum of squares per gradient bucket."""


@dataclass
class SearchParams:
    batch_sizes: Any = field(default_factory=lambda: {"min": 16, "max": 512})
    """Candidate batch sizes: a list of powers of two, ``{min: 8, max: 128}`` for every power of two in
    between, or ``auto``: a short probe run at ``base_batch`` measures the gradient noise scale and the
    grid is centred on it (B_simple/8 … B_simple·8)."""
    alpha_range: list = field(default_factory=lambda: [0.5, 0.75],
                              metadata=check(low_high_pair(), ordered_within(0.0, 1.0)))
    """[low, high] of the LR-scaling exponent: 0.5 is the sqrt rule, 1.0 the linear rule (the default
    stops at 0.75: on the built-in task alpha near 1 puts B=256 on the tolerance line)."""
    warmup_fraction_range: list = field(default_factory=lambda: [0.0, 0.2],
                                        metadata=check(low_high_pair(), ordered_within(0.0, 1.0)))
    """[low, high] of warmup as a fraction of the trial's optimizer steps."""
    num_trials: int = 18
    """Trials in total. At least one per batch size: each batch size is seeded (the middle alpha, and a
    warmup that grows with the batch from the low end of the range at the smallest batch to the high end
    at the largest) so its curve point always exists."""
    metric: str = field(default="accuracy", metadata=check(METRIC_NAME))
    """Validation metric to compare: one the spec path computes (``BUILTIN_METRICS``: accuracy, for
    sequence-classification only; eval_loss; perplexity; bleu, seq2seq only, corpus BLEU of the generated eval
    targets through ``sacrebleu``, see the ``generation`` section), or, with ``run_search``'s
    ``compute_metrics``, any key its dict returns (``f1``, ``worst_class_recall``; set ``mode`` to match)."""
    mode: Literal["max", "min"] = "max"
    """Whether a larger metric is better (checked for the loop's metrics; a ``compute_metrics`` key's is yours)."""
    tolerance: float = field(default=0.01, metadata=check(within(0, 1, ends="[)")))
    """Turning-point tolerance: a batch is as good as the best while within this (relative) margin."""
    turning_point: Literal["monotone", "raw"] = "monotone"
    """How the turning point is read from each batch size's best: ``monotone`` walks their least-squares
    fit that never improves with batch size (at equal samples the reachable quality does not, by the
    empirical model of McCandlish et al.), so one lucky or unlucky batch size cannot end or extend the walk
    alone; ``raw`` walks the bests themselves. The summary holds both."""
    seed: int = 0
    """Seed for the searcher, data order and model initialisation."""
    strategy: Literal["tpe", "random", "grid"] = "tpe"
    """How configurations are chosen: ``tpe`` (Optuna's multivariate TPE, the default), ``random``
    (Optuna's random sampler over the same space), or ``grid``: the manual method, every batch size ×
    ``grid_points`` evenly spaced alphas × as many warmups (``num_trials`` is then that product)."""
    balance_batches: bool = True
    """With ``tpe`` or ``random`` (a grid is balanced anyway): the batch sizes take turns (round robin after
    the seeds), so their trial counts differ by at most one (12 trials over 5 batch sizes: 3, 3, 2, 2, 2),
    and alpha and warmup are chosen from that batch size's own trials (Optuna's TPE on a conditional
    space). Without it TPE also chooses the batch size and spends most trials where the
    metric is best, i.e. at small batches, which leaves the large batches' best configuration, and with
    it the turning point, less well estimated."""
    grid_points: int = field(default=3, metadata=check(at_least(1)))
    """Points per range (alpha, warmup) of the ``grid`` strategy: 3 gives the ends and the middle."""
    early_stopping: bool = True
    """ASHA early stopping within each batch size; false trains every trial to the full budget."""
    repeats: int = field(default=1, metadata=check(at_least(1)))
    """Runs per batch size of its finally selected configuration (the best at the full budget): with k > 1
    the best is re-trained k - 1 more times with other seeds, and the report uses the mean with its
    standard error, a range for the turning point and a verdict on whether the noise allows an answer."""
    study_storage: Optional[str] = None
    """Where the Optuna study is kept while the search runs, for ``optuna-dashboard`` and for later
    analysis: a database URL (``sqlite:///cbs.db``, ``postgresql://…``) or the path of a journal file
    (``cbs.journal``; safe on NFS). Relative paths are taken from where the search starts. Default: in
    memory (and in Tune's own snapshot)."""
    study_name: Optional[str] = None
    """The study's name in ``study_storage``; default: the experiment's name (``<name>-<date>-<time>``).
    An existing study is continued (TPE learns from its trials) if its metric and direction match."""
    method: Literal["scratch", "branch"] = "scratch"
    """``scratch``: every candidate batch trains from initialisation to the full budget (the critical batch at
    the end of the budget). ``branch``: one trunk run at a small batch saves checkpoints, and from each, branches
    at larger batches train for a window (the ``branch:`` section): the critical batch over the course of
    training, CBS(t) (Merrill et al. 2025), and a batch-size schedule that follows it."""


@dataclass
class BranchSpec:
    """Branch mode (``search.method: branch``; see ``cbs_ray.branch_plan``). Points are a fraction of the budget
    (a number in (0, 1)) or whole samples (tokens with ``training.budget_tokens``), rounded down to whole
    batches of the largest branch batch."""

    trunk_batch_size: Optional[int] = None
    """The trunk's (small) batch. Default: the smallest of ``search.batch_sizes``."""
    checkpoints: list = field(default_factory=lambda: [0.125, 0.25, 0.5])
    """Where the trunk saves a checkpoint that branches start from."""
    window: Any = 0.125
    """How long each branch trains from its checkpoint; CBS(t) compares its loss with the trunk's at the end."""
    batch_sizes: Optional[list] = None
    """The branches' batches, each larger than the trunk's. Default: ``search.batch_sizes`` above the trunk's."""
    alphas: Optional[list] = None
    """LR-scaling exponents each branch tries (its best counts, as the paper takes the best LR per batch).
    Default: the two ends of ``search.alpha_range``."""
    tolerance: Optional[float] = field(default=None, metadata=check(within(0, 1, ends="[)")))
    """Relative loss tolerance: a branch reaches the trunk when its eval loss is at most the trunk's × (1 + this).
    Default: ``search.tolerance``."""
    validate_schedule: bool = False
    """After the branches: train the recommended batch-size schedule for the whole budget (the trunk's seed and
    data) and compare it with the trunk's fixed small batch: optimizer steps saved, final loss difference
    (``--validate-schedule`` sets it)."""


@dataclass
class GenerationSpec:
    """How a seq2seq model writes its evaluation targets for ``search.metric: bleu`` (not used otherwise):
    greedy by default, as cheap as BLEU gets, and the same for every batch size."""

    max_new_tokens: Optional[int] = field(default=None, metadata=check(positive()))
    """Tokens the decoder may write per example, end-of-sequence included (None: ``data.max_target_length``)."""
    num_beams: int = field(default=1, metadata=check(at_least(1)))
    """Beam search width (1: greedy). Each beam multiplies evaluation's decoding cost."""


@dataclass
class AshaSpec:
    grace_period_samples: int = 1024
    """No trial is stopped before it has seen this many samples (ASHA's grace period)."""
    reduction_factor: int = field(default=2, metadata=check(at_least(2)))
    """ASHA keeps the top 1/reduction_factor of trials at each rung (within one batch size)."""


@dataclass
class ResourcesSpec:
    workers_per_trial: int = field(default=1, metadata=check(at_least(1)))
    """Data-parallel workers per trial (Ray Train TorchTrainer workers). One CPU worker runs in-process."""
    cpus_per_worker: int = field(default=1, metadata=check(at_least(1)))
    """CPUs per worker; torch's thread count is set to this."""
    use_gpu: bool = False
    """One GPU per worker, NCCL backend (gloo on CPU)."""
    max_failures: int = field(default=2, metadata=check(non_negative()))
    """Restarts of a trial from its last checkpoint after a worker process dies (a spot node taken back,
    an out-of-memory kill); after that the trial is marked failed and the search goes on."""
    max_concurrent_trials: Optional[int] = field(default=None, metadata=check(at_least(1, show_value=False)))
    """Concurrent trials. Default: as many as the cluster's CPUs/GPUs fit when the search starts, so trials
    never wait on each other's workers. Set it on an autoscaling cluster, whose resources at the start
    (a CPU-only head, no GPU node yet) are not what it grows to."""


@dataclass
class MlflowSpec:
    tracking_uri: Optional[str] = None
    """MLflow tracking URI: ``file:./mlruns``, ``sqlite:///mlflow.db`` or a server's ``http://…``;
    default: MLflow's own (``MLFLOW_TRACKING_URI``)."""
    experiment_name: Optional[str] = None
    """MLflow experiment the runs go to; default: the spec's ``name``."""


@dataclass
class WandbSpec:
    project: Optional[str] = None
    """W&B project; default: the spec's ``name``."""
    mode: Literal["online", "offline", "disabled"] = "online"
    """``offline`` writes each run's directory (``wandb sync`` uploads it later), with no network."""


@dataclass
class TrackingSpec:
    """Experiment trackers, each through Ray Tune's own logger callback: one run per trial (batch size,
    alpha, warmup fraction, peak LR and seed as parameters; every milestone's metrics at step
    ``samples_seen``) and one run that holds the report's files."""

    mlflow: Optional[MlflowSpec] = None
    """Log to MLflow (``pip install "cbs-ray[mlflow]"``); trial runs are children of one parent run."""
    tensorboard: bool = False
    """TensorBoard event files in each trial's directory, stepped by ``samples_seen``
    (``tensorboard --logdir <experiment>``)."""
    wandb: Optional[WandbSpec] = None
    """Log to Weights & Biases (``pip install "cbs-ray[wandb]"``)."""


@dataclass
class SearchSpec:
    name: str = field(default="tiny-bert-sentiment", metadata=check(DIRECTORY_NAME))
    """Experiment name: the results directory and the Tune experiment are named after it."""
    task: Literal["sequence-classification", "causal-lm", "seq2seq"] = "sequence-classification"
    """What the model learns. ``seq2seq``: an encoder-decoder (``AutoModelForSeq2SeqLM``, e.g. T5) writes
    ``data.target_column`` from ``data.text_column``."""
    model: ModelSpec = field(default_factory=ModelSpec)
    data: DataSpec = field(default_factory=DataSpec)
    training: TrainingSpec = field(default_factory=TrainingSpec)
    search: SearchParams = field(default_factory=SearchParams)
    generation: GenerationSpec = field(default_factory=GenerationSpec)
    asha: AshaSpec = field(default_factory=AshaSpec)
    branch: BranchSpec = field(default_factory=BranchSpec)
    resources: ResourcesSpec = field(default_factory=ResourcesSpec)
    tracking: TrackingSpec = field(default_factory=TrackingSpec)
    storage_path: str = "~/ray_results"
    """Where Tune persists the experiment (a local path, shared filesystem or s3:// / gs:// URI)."""
    output_dir: Optional[str] = None
    """Where summary.json and trials.csv go (default ./cbs_results/<name>)."""

    # ---- derived values (valid only after validate()) -------------------------------------------
    @property
    def auto_batch_sizes(self) -> bool:
        return self.search.batch_sizes == "auto"

    @property
    def batch_sizes(self) -> list[int]:
        """The candidate batch sizes; with ``auto``, until the probe has run, just the probe's batch."""
        if self.auto_batch_sizes:
            return [self.training.base_batch]
        return _expand_batch_sizes(self.search.batch_sizes)

    @property
    def results_dir(self) -> Path:
        return Path(self.output_dir or Path("cbs_results") / self.name).expanduser().resolve()

    @property
    def storage_uri(self) -> str:
        if "://" in self.storage_path:
            return self.storage_path
        return str(Path(self.storage_path).expanduser().resolve())


# ---- loading ---------------------------------------------------------------------------------------

def load_spec(path: str | os.PathLike | None = None, overrides: list[str] = ()) -> SearchSpec:
    """Read a YAML spec (or the embedded default when ``path`` is None), apply ``key=value`` overrides
    and validate. Only safe YAML is parsed."""
    raw = {} if path is None else _read_spec_file(path)
    apply_overrides(raw, overrides)
    return spec_from_dict(raw)


def _read_spec_file(path: str | os.PathLike) -> dict:
    """The raw mapping of a YAML spec file. An empty file (nothing but whitespace and comments) is an
    error, not the defaults: the user meant to write something there."""
    p = Path(path)
    if not p.is_file():
        raise SpecError(f"--space: no such file: {path}")
    try:
        text = p.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise SpecError(f"{path}: not a UTF-8 text file") from None
    if "\x00" in text:  # binary that happens to decode; YAML's own error would quote the bytes
        raise SpecError(f"{path}: not a UTF-8 text file")
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise SpecError(f"--space: {path} is not valid YAML ({str(e).splitlines()[0]})") from None
    if raw is None and not _has_content(text):  # `null` is content; comments and `---` are not
        raise SpecError(f"{path} is empty")
    raw = {} if raw is None else raw  # `null` alone: the defaults; `[]`, `0`, `""` are not a spec
    if not isinstance(raw, dict):
        raise SpecError(f"--space: {path} must hold a mapping at the top level")
    # Relative data files are relative to the spec file, so a spec travels with its data.
    data = raw.get("data")
    if isinstance(data, dict):
        for key in ("train_file", "eval_file"):
            if isinstance(data.get(key), str) and not Path(data[key]).expanduser().is_absolute():
                data[key] = str((p.parent / data[key]).resolve())
    return raw


def _has_content(text: str) -> bool:
    markers = (yaml.StreamStartToken, yaml.StreamEndToken, yaml.DocumentStartToken, yaml.DocumentEndToken,
               yaml.DirectiveToken)
    return any(not isinstance(token, markers) for token in yaml.scan(text, Loader=yaml.SafeLoader))


def apply_overrides(raw: dict, overrides: list[str]) -> dict:
    """Apply ``dotted.key=value`` strings (values parsed as YAML scalars/lists) onto a raw spec dict."""
    for item in overrides:
        if "=" not in item:
            raise SpecError(f"--set {item}: expected key=value")
        key, _, text = item.partition("=")
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError:
            raise SpecError(f"--set {key}: cannot parse value {text!r}") from None
        node, cls = raw, SearchSpec
        parts = key.strip().split(".")
        for part in parts[:-1]:
            if node.get(part) is None:
                # Not given (or an empty section): a section starts empty; a mapping the spec leaves at its
                # default (model.config, search.batch_sizes) starts from that default, so that one key of it
                # can be set.
                node[part] = _default_mapping(cls, part)
            node = node[part]
            cls = _section_class(cls, part)
            if not isinstance(node, dict):
                raise SpecError(f"--set {key}: {part} is not a section")
        node[parts[-1]] = value
    return raw


def _section_class(cls, name: str):
    """The dataclass of section ``name`` of ``cls`` (None: not a section, or ``cls`` is not one)."""
    if cls is None or not dataclasses.is_dataclass(cls):
        return None
    return _section_of(typing.get_type_hints(cls).get(name))


def _section_of(hint: Any):
    """The dataclass a field's type hint names, also when the section is optional (``Optional[MlflowSpec]``:
    absent or null turns it off, a mapping, even an empty one, turns it on); None for a plain field."""
    if dataclasses.is_dataclass(hint):
        return hint
    inner = [a for a in typing.get_args(hint) if a is not type(None)] if _admits_none(hint) else []
    return inner[0] if len(inner) == 1 and dataclasses.is_dataclass(inner[0]) else None


def _default_mapping(cls, name: str) -> dict:
    """What an override into ``name`` of ``cls`` starts from: {} for a section, a copy of a mapping-valued
    field's default, {} otherwise."""
    if cls is None or not dataclasses.is_dataclass(cls) or _section_class(cls, name) is not None:
        return {}
    default = getattr(cls(), name, None) if name in {f.name for f in dataclasses.fields(cls)} else None
    return copy.deepcopy(default) if isinstance(default, dict) else {}


def spec_from_dict(raw: dict) -> SearchSpec:
    spec = _build(SearchSpec, raw, "")
    validate(spec)
    return spec


def spec_to_dict(spec: SearchSpec) -> dict:
    return dataclasses.asdict(spec)


def _build(cls, raw: Any, where: str):
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise SpecError(f"{where or 'spec'}: expected a mapping, got {type(raw).__name__}")
    hints = _hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(raw) - names)
    if unknown:
        raise SpecError(f"{_join(where, unknown[0])}: unknown key (known: {', '.join(sorted(names))})")
    values = {}
    for key, value in raw.items():
        path = _join(where, key)
        hint = hints[key]
        section = _section_of(hint)
        if section is not None and value is None and _admits_none(hint):
            values[key] = None
        elif section is not None:
            values[key] = _build(section, value, path)
        else:
            values[key] = _check_type(value, hint, path)
    return cls(**values)


def _check_type(value: Any, hint: Any, path: str) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _check_type(value, inner[0], path)
    if origin is Literal:
        if value not in args:
            raise SpecError(f"{path}: must be one of {', '.join(map(str, args))}, got {value!r}")
        return value
    if hint is Any:
        return value
    if hint is bool:
        if not isinstance(value, bool):
            raise SpecError(f"{path}: expected true/false, got {value!r}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise SpecError(f"{path}: expected an integer, got {value!r}")
        return value
    if hint is float:
        if isinstance(value, str):  # YAML 1.1 reads 3e-4 (no dot) as a string; users mean a number
            try:
                value = float(value)
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise SpecError(f"{path}: expected a number, got {value!r}")
        if not math.isfinite(value):  # NaN passes every comparison the validation makes
            raise SpecError(f"{path}: expected a finite number, got {value!r}")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise SpecError(f"{path}: expected a string, got {value!r}")
        return value
    if hint in (list, dict):
        if not isinstance(value, hint):
            raise SpecError(f"{path}: expected a {'list' if hint is list else 'mapping'}, got {value!r}")
        return value
    return value


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


# ---- validation ------------------------------------------------------------------------------------

def validate(spec: SearchSpec) -> None:
    """Check a built spec, raising ``SpecError`` at the first problem. First the batch grid, which the other
    rules measure against, and the either-or choices (a value that is wrong *and* should not be set at all
    gets the latter message); then every field's own checks, declared beside the field; then the rules that
    relate fields, in ``CROSS_FIELD_RULES`` order. Checks against the data (the largest batch against the
    training set, columns, labels) happen once it is loaded: ``resolve_budget`` and ``cbs_ray.data``."""
    _batch_grid_is_well_formed(spec)
    _one_model_source(spec)
    _one_budget(spec)
    _check_fields(spec, "")
    for rule in CROSS_FIELD_RULES:
        rule(spec)


def _check_fields(section: Any, where: str) -> None:
    """Apply the checks declared in each field's metadata, section by section in field order."""
    hints = _hints(type(section))
    for f in dataclasses.fields(section):
        value, path = getattr(section, f.name), _join(where, f.name)
        if dataclasses.is_dataclass(value):
            _check_fields(value, path)
        elif value is not None or not _admits_none(hints[f.name]):
            for rule in f.metadata.get("checks", ()):
                rule(value, path)


@functools.cache
def _hints(cls) -> dict:
    return typing.get_type_hints(cls)


def _admits_none(hint: Any) -> bool:
    return typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in typing.get_args(hint)


# The probe of ``search.batch_sizes: auto`` trains at training.base_batch: its errors name that field.
_PROBE_BATCH = "training.base_batch (the probe's batch with search.batch_sizes: auto)"


def _batch_grid_is_well_formed(spec: SearchSpec) -> None:
    if spec.auto_batch_sizes:
        _check_power_of_two(spec.training.base_batch, _PROBE_BATCH)
    else:
        _expand_batch_sizes(spec.search.batch_sizes)


def _expand_batch_sizes(value: Any) -> list[int]:
    if isinstance(value, dict):
        unknown = set(value) - {"min", "max"}
        if unknown or not {"min", "max"} <= set(value):
            raise SpecError("search.batch_sizes: expected {min: B, max: B} or a list of powers of two")
        low, high = value["min"], value["max"]
        for name, b in (("min", low), ("max", high)):
            _check_power_of_two(b, f"search.batch_sizes.{name}")
        if low > high:
            raise SpecError("search.batch_sizes: min is larger than max")
        return [2 ** k for k in range(low.bit_length() - 1, high.bit_length())]
    if isinstance(value, list):
        return _batch_list(value, "search.batch_sizes")
    raise SpecError(f"search.batch_sizes: expected a list or {{min, max}}, got {value!r}")


def _batch_list(values: list, path: str) -> list[int]:
    """A listed grid of batch sizes (``search.batch_sizes``, ``branch.batch_sizes``): non-empty, powers of two,
    no duplicate; sorted."""
    if not values:
        raise SpecError(f"{path}: empty list")
    for b in values:
        _check_power_of_two(b, path)
    if len(set(values)) != len(values):
        raise SpecError(f"{path}: duplicate batch size")
    return sorted(values)


def _check_power_of_two(b: Any, path: str) -> None:
    if isinstance(b, bool) or not isinstance(b, int):
        raise SpecError(f"{path}: expected integer batch sizes, got {b!r}")
    if b <= 0:
        raise SpecError(f"{path}: batch size must be positive, got {b}")
    if b & (b - 1):
        raise SpecError(f"{path}: batch size must be a power of two, got {b}")


# ---- cross-field rules: each names the field it blames ----------------------------------------------

def _one_model_source(spec: SearchSpec) -> None:
    if (spec.model.name is None) == (spec.model.config is None):
        raise SpecError("model: set exactly one of model.name (pretrained) and model.config (from scratch)")


def _one_budget(spec: SearchSpec) -> None:
    t = spec.training
    if sum(x is not None for x in (t.budget_samples, t.budget_epochs, t.budget_tokens)) != 1:
        raise SpecError("training: set exactly one of budget_samples, budget_epochs and budget_tokens (the others "
                        "null; budget_samples has a default)")


def _hub_source_names_a_dataset(spec: SearchSpec) -> None:
    if spec.data.source == "hub" and not spec.data.hub_name:
        raise SpecError("data.hub_name: required when data.source is hub")


def _local_files_exist(spec: SearchSpec) -> None:
    if spec.data.source != "files":
        return
    for key in ("train_file", "eval_file"):
        value = getattr(spec.data, key)
        if not value:
            raise SpecError(f"data.{key}: required when data.source is files")
        if not Path(value).expanduser().is_file():
            raise SpecError(f"data.{key}: no such file: {value}")
        if Path(value).suffix.lower() not in (".csv", ".tsv", ".json", ".jsonl", ".parquet"):
            raise SpecError(f"data.{key}: unsupported format {Path(value).suffix!r} "
                            "(csv, tsv, json, jsonl, parquet)")


def _probe_batch_splits_over_workers(spec: SearchSpec) -> None:
    t, workers = spec.training, spec.resources.workers_per_trial
    if spec.auto_batch_sizes and t.base_batch % workers:
        raise SpecError(f"{_PROBE_BATCH}: {t.base_batch} does not split over resources.workers_per_trial="
                        f"{workers} workers")


def _reports_land_on_whole_batches(spec: SearchSpec) -> None:
    """Every report lands on an exact sample milestone of every batch size (with auto: of the probe's)."""
    t, largest = spec.training, spec.batch_sizes[-1]
    if t.eval_every_samples > 0 and not t.eval_every_samples % largest:
        return
    if spec.auto_batch_sizes:
        raise SpecError(f"training.eval_every_samples: must be a positive multiple of {_PROBE_BATCH}, "
                        f"{t.base_batch}, got {t.eval_every_samples}")
    raise SpecError(f"training.eval_every_samples: must be a positive multiple of the largest batch "
                    f"size {largest}, got {t.eval_every_samples}")


def _budget_samples_fit(spec: SearchSpec) -> None:
    if spec.training.budget_samples is not None:
        _check_budget(spec, spec.training.budget_samples)


def _tokens_need_a_causal_lm(spec: SearchSpec) -> None:
    """A token budget and packing are a causal LM's (a classifier's or seq2seq model's example is a unit, not
    a run of tokens), and a token budget needs packed texts: only then is every sample the same tokens."""
    if spec.task != "causal-lm":
        if spec.training.budget_tokens is not None:
            raise SpecError(f"training.budget_tokens: a token budget needs task causal-lm (the task is "
                            f"{spec.task}); use training.budget_samples or training.budget_epochs")
        if spec.data.packing:
            raise SpecError(f"data.packing: only a causal LM's texts are packed (the task is {spec.task}); "
                            "drop data.packing")
    elif spec.training.budget_tokens is not None and spec.data.packing is False:
        raise SpecError("data.packing: a token budget (training.budget_tokens) needs packed texts, every sample "
                        "data.max_seq_length tokens; drop data.packing: false or use training.budget_samples")


def _budget_tokens_fit(spec: SearchSpec) -> None:
    """The budget ``budget_tokens`` makes (``budget.samples_for_tokens``) fills a report interval and obeys
    the budget rules."""
    from .budget import samples_for_tokens

    t = spec.training
    if t.budget_tokens is None:
        return
    samples, _ = samples_for_tokens(t.budget_tokens, spec.data.max_seq_length, t.eval_every_samples)
    if samples <= 0:
        raise SpecError(f"training.budget_tokens: {t.budget_tokens} tokens is less than one report interval "
                        f"({t.eval_every_samples} samples of {spec.data.max_seq_length} tokens = "
                        f"{t.eval_every_samples * spec.data.max_seq_length} tokens)")
    _check_budget(spec, samples)


def _check_budget(spec: SearchSpec, budget: int) -> None:
    """The budget rules, for ``budget_samples`` or the budget ``budget_epochs`` resolves to."""
    _budget_fits_the_cadence(spec, budget)
    _grace_period_fits_budget(spec, budget)


def _budget_fits_the_cadence(spec: SearchSpec, budget: int) -> None:
    t, largest = spec.training, spec.batch_sizes[-1]
    if budget < largest:
        raise SpecError(f"training.budget_samples: {budget} is smaller than the largest batch size {largest}")
    if budget % t.eval_every_samples:
        raise SpecError(f"training.budget_samples: must be a multiple of training.eval_every_samples "
                        f"({t.eval_every_samples}), got {budget}")


def _grace_period_fits_budget(spec: SearchSpec, budget: int) -> None:
    # Checked with batch_sizes: auto too, or the search would fail only after the probe.
    if spec.asha.grace_period_samples > budget:
        raise SpecError(f"asha.grace_period_samples: {spec.asha.grace_period_samples} exceeds the budget {budget}")


def _persistent_workers_need_workers(spec: SearchSpec) -> None:
    t = spec.training
    if t.persistent_workers and dataloader_workers(t, spec.resources.use_gpu) == 0:
        raise SpecError("training.persistent_workers: needs DataLoader workers; set training.dataloader_workers "
                        "above 0 (it is 0 on a CPU unless set)")


def _every_batch_size_is_trained(spec: SearchSpec) -> None:
    s, count = spec.search, len(spec.batch_sizes)
    if s.num_trials < count and s.strategy != "grid":
        raise SpecError(f"search.num_trials: must be at least the number of batch sizes ({count}) "
                        f"so every batch size is trained, got {s.num_trials}")


def _accuracy_needs_classification(spec: SearchSpec) -> None:
    if spec.search.metric == "accuracy" and spec.task != "sequence-classification":
        raise SpecError("search.metric: accuracy needs task sequence-classification; use eval_loss")


def _bleu_needs_seq2seq(spec: SearchSpec) -> None:
    if spec.search.metric == "bleu" and spec.task != "seq2seq":
        raise SpecError(f"search.metric: bleu needs task seq2seq (the task is {spec.task}); use eval_loss")


def _translation_is_seq2seq(spec: SearchSpec) -> None:
    """The built-in translation task is a seq2seq task's. (A seq2seq task on the built-in sentiment data is
    refused where the data are loaded: with the objects path's own data the data section stays at its
    default, which names the sentiment task.)"""
    d = spec.data
    if d.source == "builtin" and d.builtin_task == "translation" and spec.task != "seq2seq":
        raise SpecError(f"data.builtin_task: translation is a seq2seq task; set task: seq2seq (got {spec.task})")


def _seq2seq_has_no_probe(spec: SearchSpec) -> None:
    if spec.task == "seq2seq" and spec.training.probe_micro_batch:
        raise SpecError("training.probe_micro_batch: not available with task seq2seq yet (the probe trains on "
                        "random single sequences, not source-target pairs); set training.micro_batch_size")


def _generation_needs_seq2seq(spec: SearchSpec) -> None:
    if spec.generation != GenerationSpec() and spec.task != "seq2seq":
        raise SpecError(f"generation: only a seq2seq task generates (the task is {spec.task}); drop the section")


def _mode_matches_metric(spec: SearchSpec) -> None:
    s = spec.search
    if s.metric not in BUILTIN_METRICS:
        return  # a compute_metrics key: its direction is the user's to say
    expected = "max" if s.metric in ("accuracy", "bleu") else "min"
    if s.mode != expected:
        better = "higher" if expected == "max" else "lower"
        raise SpecError(f"search.mode: {s.metric} is better when it is {better}; use mode {expected}")


def _grid_trains_to_the_full_budget(spec: SearchSpec) -> None:
    if spec.search.strategy == "grid" and spec.search.early_stopping:
        raise SpecError("search.early_stopping: the grid strategy trains every point to the full budget; "
                        "set search.early_stopping=false")


def _grace_period_is_whole_report_intervals(spec: SearchSpec) -> None:
    grace, every = spec.asha.grace_period_samples, spec.training.eval_every_samples
    if grace <= 0 or grace % every:
        raise SpecError(f"asha.grace_period_samples: must be a positive multiple of "
                        f"training.eval_every_samples ({every}), got {grace}")


def _batch_sizes_split_over_workers(spec: SearchSpec) -> None:
    workers = spec.resources.workers_per_trial
    for b in spec.batch_sizes:
        if b % workers:
            raise SpecError(f"search.batch_sizes: {b} does not split over "
                            f"resources.workers_per_trial={workers} workers")


def _study_needs_optuna(spec: SearchSpec) -> None:
    if spec.search.study_storage is not None and spec.search.strategy == "grid":
        raise SpecError("search.study_storage: the grid strategy does not use Optuna; set search.strategy to "
                        "tpe or random, or drop the study storage")
    if spec.search.study_name is not None and spec.search.study_storage is None:
        raise SpecError("search.study_name: names a study in search.study_storage, which is not set")


# ---- branch mode (search.method: branch; cbs_ray.branch_plan resolves the section against the budget) --

def _branch_mode_stands_alone(spec: SearchSpec) -> None:
    """What branch mode cannot combine with: a probe-chosen grid (the branches need their batches before
    anything trains), an Optuna study (branch mode trains a fixed grid: each checkpoint × batch × alpha),
    trackers (not wired to branch mode's runs yet). ``search.repeats``, ``num_trials``, ``strategy`` and the
    ``asha`` section are a from-scratch search's and are ignored; the schedule switch needs branch mode."""
    s = spec.search
    if s.method != "branch":
        if spec.branch.validate_schedule:
            raise SpecError("branch.validate_schedule: validates the schedule a branch search recommends; "
                            "set search.method=branch (--validate-schedule)")
        return
    if spec.auto_batch_sizes:
        raise SpecError("search.batch_sizes: auto is not available with search.method branch (the branches need "
                        "their batches before anything trains); list the batch sizes")
    if s.study_storage is not None:
        raise SpecError("search.study_storage: search.method branch trains a fixed grid (checkpoint × batch × "
                        "alpha), not an Optuna study; drop the study storage")
    if spec.tracking != TrackingSpec():
        raise SpecError("tracking: not available with search.method branch yet; drop the tracking section")
    if "://" in spec.storage_path:
        raise SpecError(f"storage_path: search.method branch writes the trunk's checkpoints to a directory every "
                        f"trial reads (a local or shared filesystem), not a URI; got {spec.storage_path}")


def _branch_batches_are_larger_than_the_trunks(spec: SearchSpec) -> None:
    """The trunk's batch and the branches' are powers of two that split over the workers, every branch
    batch is larger than the trunk's, and every report lands on whole batches of the largest."""
    b, workers = spec.branch, spec.resources.workers_per_trial
    if spec.search.method != "branch":
        return
    if b.trunk_batch_size is not None:
        _check_power_of_two(b.trunk_batch_size, "branch.trunk_batch_size")
    trunk = b.trunk_batch_size or spec.batch_sizes[0]
    branches = _batch_list(b.batch_sizes, "branch.batch_sizes") if b.batch_sizes is not None else \
        [x for x in spec.batch_sizes if x > trunk]
    if not branches:
        raise SpecError(f"branch.batch_sizes: no batch size larger than the trunk's ({trunk}) to branch at; "
                        f"list some in search.batch_sizes or branch.batch_sizes")
    if branches[0] <= trunk:
        raise SpecError(f"branch.batch_sizes: a branch's batch must be larger than the trunk's "
                        f"(branch.trunk_batch_size {trunk}), got {branches[0]}")
    for key, x in (("branch.trunk_batch_size", trunk), *(("branch.batch_sizes", x) for x in branches)):
        if x % workers:
            raise SpecError(f"{key}: {x} does not split over resources.workers_per_trial={workers} workers")
    every = spec.training.eval_every_samples
    if every % branches[-1]:
        raise SpecError(f"training.eval_every_samples: must be a multiple of the largest branch batch "
                        f"{branches[-1]}, got {every}")
    alphas = b.alphas
    if alphas is not None and (not alphas or any(isinstance(a, bool) or not isinstance(a, (int, float))
                                                  or not math.isfinite(a) for a in alphas)):
        raise SpecError(f"branch.alphas: expected a non-empty list of numbers, got {alphas!r}")


def _branch_points_fit_the_budget(spec: SearchSpec) -> None:
    """Checkpoints and the window are fractions in (0, 1) of the budget or whole samples (tokens with a
    token budget); with the budget known here (``training.budget_samples``), the window fits after the last
    checkpoint. Otherwise ``resolve_branching`` checks the same once the budget is resolved, before Ray."""
    b = spec.branch
    if spec.search.method != "branch":
        return
    if not b.checkpoints:
        raise SpecError("branch.checkpoints: expected a non-empty list of fractions in (0, 1) or whole samples")
    from .branch_plan import check_point, resolve_branching

    whole = "tokens" if spec.training.budget_tokens is not None else "samples"
    for key, value in [*(("branch.checkpoints", p) for p in b.checkpoints), ("branch.window", b.window)]:
        check_point(value, key=key, whole=whole)
    if spec.training.budget_samples is not None:
        resolve_branching(spec, spec.training.budget_samples)


CROSS_FIELD_RULES: tuple[Callable[[SearchSpec], None], ...] = (
    _hub_source_names_a_dataset, _local_files_exist, _probe_batch_splits_over_workers,
    _reports_land_on_whole_batches, _budget_samples_fit, _tokens_need_a_causal_lm, _budget_tokens_fit,
    _persistent_workers_need_workers, _every_batch_size_is_trained, _accuracy_needs_classification, _bleu_needs_seq2seq, _translation_is_seq2seq,
    _seq2seq_has_no_probe, _generation_needs_seq2seq, _mode_matches_metric,
    _grid_trains_to_the_full_budget, _grace_period_is_whole_report_intervals, _batch_sizes_split_over_workers,
    _study_needs_optuna, _branch_mode_stands_alone, _branch_batches_are_larger_than_the_trunks,
    _branch_points_fit_the_budget,
)
"""The rules that relate fields, in the order ``validate`` applies them; the first that fails is the error.
A rule comes after those it relies on: ``_reports_land_on_whole_batches`` makes ``eval_every_samples`` a
positive divisor before the budget and grace-period rules divide by it."""


def dataloader_workers(training: TrainingSpec, use_gpu: bool) -> int:
    """The DataLoader worker processes a trial's worker runs: as set, else 2 on a GPU and 0 on a CPU."""
    if training.dataloader_workers is not None:
        return training.dataloader_workers
    return 2 if use_gpu else 0


def apply_batch_grid(spec: SearchSpec, grid: list[int]) -> list[str]:
    """Replace ``batch_sizes: auto`` by ``grid`` and make the cadence fit it: ``eval_every_samples`` is
    raised to a multiple of the largest batch, the budget and grace period to multiples of that.
    Returns what changed, one line each, for the user to see."""
    t, a = spec.training, spec.asha
    changes = []
    spec.search.batch_sizes = sorted(grid)
    largest = max(grid)
    if t.eval_every_samples % largest:
        new = -(-t.eval_every_samples // largest) * largest
        changes.append(f"training.eval_every_samples {t.eval_every_samples} -> {new} (a multiple of B={largest})")
        t.eval_every_samples = new
    if t.budget_samples is not None and t.budget_samples % t.eval_every_samples:
        new = -(-t.budget_samples // t.eval_every_samples) * t.eval_every_samples
        changes.append(f"training.budget_samples {t.budget_samples} -> {new}")
        t.budget_samples = new
    if a.grace_period_samples % t.eval_every_samples:
        new = -(-a.grace_period_samples // t.eval_every_samples) * t.eval_every_samples
        changes.append(f"asha.grace_period_samples {a.grace_period_samples} -> {new}")
        a.grace_period_samples = new
    if spec.search.num_trials < len(grid):
        changes.append(f"search.num_trials {spec.search.num_trials} -> {len(grid)} (one per batch size)")
        spec.search.num_trials = len(grid)
    validate(spec)
    return changes


def resolve_budget(spec: SearchSpec, train_examples: int) -> int:
    """The equal-sample budget in samples, resolving ``budget_epochs`` against the training set size (with
    packed texts, its number of blocks) and ``budget_tokens`` into whole samples of ``max_seq_length``
    tokens, and checking batch sizes against the data."""
    from .budget import samples_for_tokens

    largest = spec.batch_sizes[-1]
    if largest > train_examples:
        raise SpecError(f"search.batch_sizes: largest batch {largest} exceeds the {train_examples} "
                        "training examples")
    t = spec.training
    if t.budget_samples is not None:
        return t.budget_samples
    if t.budget_tokens is not None:  # validated: a whole number of report intervals within the budget rules
        return samples_for_tokens(t.budget_tokens, spec.data.max_seq_length, t.eval_every_samples)[0]
    samples = int(t.budget_epochs * train_examples) // t.eval_every_samples * t.eval_every_samples
    if samples <= 0:
        raise SpecError(f"training.budget_epochs: {t.budget_epochs} epochs of {train_examples} examples is "
                        f"less than one report interval ({t.eval_every_samples} samples)")
    _check_budget(spec, samples)
    return samples
