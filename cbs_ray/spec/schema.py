"""The spec's sections as typed dataclasses, one-to-one with the YAML's nested maps: every field has
a docstring and carries its unit in its name. ``SearchSpec()`` with no arguments *is* the embedded default:
a tiny BERT trained from its config on the built-in offline sentiment task, sized to finish on a 2-core
CPU in minutes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Optional

from cbs_ray.records.method_registry import DEFAULT_METHOD
from cbs_ray.records.names import default_report_dir
from cbs_ray.spec.checks import (
    DIRECTORY_NAME,
    HAS_MODEL_TYPE,
    MAX_BUILTIN_EXAMPLES,
    MAX_GRID_POINTS,
    MAX_REPEATS,
    MAX_SAMPLES,
    MAX_SEQUENCE,
    MAX_TOKENS,
    MAX_TRIALS,
    METRIC_NAME,
    POSITIVE_NUMBER,
    SEED_MAX,
    a_count,
    a_registered_method,
    at_least,
    between,
    check,
    expand_batch_sizes,
    greater_than,
    low_high_pair,
    non_negative,
    ordered_within,
    positive,
    within,
)
from cbs_ray.spec.paths import expand_user
from cbs_ray.spec.sections import default_sections, section_classes

__all__ = ["SearchSpec", "ModelSpec", "DataSpec", "TrainingSpec", "SearchSection", "GenerationSpec", "AshaSpec",
           "ResourcesSpec"]


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
    source: Literal["builtin", "hub", "files", "parquet"] = "builtin"
    """Where the text comes from: the built-in offline task, ``load_dataset`` from the hub, local files, or
    ``parquet``: a folder of Parquet shards (``path``) streamed to each worker through Ray Data, never loaded
    whole (``task: causal-lm``; docs/large-models.md)."""
    path: Optional[str] = None
    """``source: parquet``: the folder of ``*.parquet`` shards, one schema: an ``input_ids`` column of token-id
    lists (every row ``max_seq_length`` tokens or more, cut to it), or a ``text_column`` of texts, tokenised by
    ``model.tokenizer`` (a pretrained tokenizer: the corpus is never read whole to train one). A relative path is
    the spec file's folder's (``--set``: the working folder's), stored absolute."""
    eval_examples: int = field(default=1024, metadata=check(positive(show_value=False)))
    """``source: parquet``: the evaluation set, the first this many rows of the last shard (in name order),
    held out of training and materialised (it is evaluated at every report)."""
    builtin_task: Literal["sentiment", "translation", "markov", "python_source"] = "sentiment"
    """The built-in task: ``sentiment``, generated sentences whose label is whether positive words outnumber
    negative ones, with 5 % label noise; ``translation`` (``task: seq2seq`` only), word sequences mapped
    to a made-up language through a fixed dictionary, each adjective moved behind its noun; or ``markov``
    (``task: causal-lm`` only), sequences of a Zipfian, low-rank Markov chain whose next-token distribution is
    known, so the evaluation also reports the exact ``excess_loss`` (``data.markov``; the ``markov_*`` keys); or
    ``python_source`` (``task: causal-lm`` only), a real corpus: the running interpreter's standard library
    sources as bytes (vocabulary 256), packed into blocks of ``max_seq_length``, split by file (about 5 % of the
    files held out for evaluation; ``data.python_source``). No download; see ``cbs_ray.data``."""
    markov_vocab_size: int = field(default=512, metadata=check(between(2, 8192)))
    """The ``markov`` language's vocabulary: tokens 0…V−1, token j of Zipf rank j + 1. At most 8192: its exact
    next-token table is V×V float64 (512 MiB at 8192, built with a few copies); 10⁹ ran out of memory."""
    markov_rank: int = field(default=16, metadata=check(between(1, 1024)))
    """r: the rank of the ``markov`` language's token interactions (U, W ∈ R^{V×r}). At most 1024: a rank above
    the vocabulary adds nothing, and 10⁶ took 94 s to plan."""
    markov_zipf_exponent: float = field(default=1.0, metadata=check(between(0, 10)))
    """a: the Zipf exponent of the ``markov`` language; the next token's logits are −a·ln(rank_j) +
    s·⟨U_i, W_j⟩/√r and the first token follows the Zipf unigram rank^−a. At most 10 (token 2 already 1024 times
    rarer than token 1; natural text is near 1)."""
    markov_coupling: float = field(default=3.0, metadata=check(between(0, 100)))
    """s: how strongly the ``markov`` language's next token depends on the token before it (0: a unigram; at most
    100, where every next token is all but certain)."""
    markov_seed: int = field(default=1234, metadata=check(between(0, SEED_MAX)))
    """The seed that draws the ``markov`` language (U and W) and its training and evaluation sequences; the
    search's seeds vary the data order and the initial weights, not the language."""
    builtin_negation: float = field(default=0.0, metadata=check(within(0, 1, ends="[]")))
    """The built-in task's chance that a sentiment word is negated by "not" (which flips it). 0 by default:
    a tiny model learns negation as a sudden jump whose timing varies from seed to seed by more than a
    factor 2 of steps, which makes the critical batch a coin toss; 0.2 is the harder task of earlier
    versions."""
    builtin_train_examples: int = field(default=8192, metadata=check(between(1, MAX_BUILTIN_EXAMPLES)))
    """Size of the generated training set (``markov``: at least 4 budgets of fresh sequences whatever this says,
    so that no sequence is seen twice within a run); at most 10⁷ (generated in memory)."""
    builtin_eval_examples: int = field(default=24576, metadata=check(between(1, MAX_BUILTIN_EXAMPLES)))
    """Size of the generated evaluation set (at most 10⁷, generated in memory). The default keeps an accuracy's
    standard error at most 0.0032
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
    max_seq_length: int = field(default=16, metadata=check(between(4, MAX_SEQUENCE)))
    """Tokens per example after truncation/padding (the built-in task's longest sentence is 13 words:
    16 holds it with [CLS] and [SEP]). For seq2seq: the source's tokens. For ``markov``: every sequence's
    length. At most 131 072 (the longest contexts trained today; 10⁷ ran out of memory)."""
    max_target_length: int = field(default=16, metadata=check(between(2, MAX_SEQUENCE)))
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
    budget_samples: Optional[int] = field(default=7168, metadata=check(between(1, MAX_SAMPLES)))
    """Equal-sample budget: every trial trains on exactly this many samples, whatever its batch size (at most
    2⁴⁰, ``spec.checks.MAX_SAMPLES``). The
    default: batch sizes up to 128 (56 steps or more) reach the built-in task's ~0.95 ceiling, 256 (28
    steps) and 512 (14) fall short."""
    budget_epochs: Optional[float] = field(default=None, metadata=check(positive(), between(0, 10**6)))
    """Alternative to ``budget_samples``: epochs over the training set, rounded down to a whole number of
    ``eval_every_samples``. Set ``budget_samples: null`` to use it."""
    budget_tokens: Optional[int] = field(default=None, metadata=check(between(1, MAX_TOKENS)))
    """Alternative to ``budget_samples`` for ``task: causal-lm``: every trial trains on this many tokens, as
    pretraining budgets are counted. The texts are packed (``data.packing``), so every sample is
    ``data.max_seq_length`` tokens and the budget is ``budget_tokens // max_seq_length`` samples, rounded down
    to a whole number of ``eval_every_samples`` (the plan prints the tokens actually trained). Set
    ``budget_samples: null`` to use it."""
    base_lr: float = field(default=5.0e-4, metadata=check(POSITIVE_NUMBER))
    """Learning rate tuned at ``base_batch`` (B0); trials use base_lr · (B / B0) ** alpha."""
    base_batch: int = field(default=16, metadata=check(between(1, 2**24)))
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
    compilation (tens of seconds); on an H200, BERT-base bf16 ran 7 % faster compiled
    (BENCHMARKS.md#large-batches-and-throughput)."""
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
    eval_every_samples: int = field(default=1024, metadata=check(between(1, MAX_SAMPLES)))
    """Report cadence: evaluate, report and checkpoint every this many samples. Must be a multiple of the
    largest batch size so every report lands on an exact sample milestone."""
    micro_batch_size: Optional[int] = field(default=32, metadata=check(positive()))
    """Cap on the per-worker micro-batch; larger batches use gradient accumulation (None: no cap). The
    default 32 also lets a single worker measure the gradient noise scale at B >= 64."""
    probe_micro_batch: bool = False
    """On GPU, find the largest per-worker micro-batch that fits (forward + backward + optimizer step at
    growing sizes, 10 % safety margin, minimum across workers, cached in ~/.cache/cbs_ray/) and use it as
    the cap, accumulating the rest. On CPU only with ``memory_limit_gb``, else skipped."""
    eval_subset_examples: Optional[int] = field(default=4096, metadata=check(positive("must be positive or null")))
    """A from-scratch trial's reports before its last evaluate only the first N examples of the evaluation set
    (the same N for every trial, so comparisons between trials stay paired); the last report, at the full
    budget where every reading is taken, evaluates all of them. On the default task evaluation was 81 % of a
    trial's time (``bench/trial_profile.py``); 4096 examples keep an intermediate accuracy's standard error
    under 0.008 (0.0034 near the 0.95 ceiling), for ASHA's comparisons and the curves. The ladder and branch
    mode read every evaluation and always evaluate all. None: every report evaluates all."""
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
    parallelism: Literal["ddp", "fsdp"] = "ddp"
    """How a trial's workers share the model: ``ddp`` (each holds all of it; gradients all-reduced) or ``fsdp``
    (PyTorch's FSDP2, ``fully_shard``: parameters, gradients and optimizer state sharded over the workers, each
    transformer block gathered only while it runs; for models whose AdamW state does not fit one device). The
    blocks are ``fsdp_block_class``'s modules, else the model's ``_no_split_modules`` classes (Hugging Face),
    else the layers of every ``nn.ModuleList`` of repeated modules (``train.fsdp``; docs/large-models.md).
    One worker trains unsharded either way."""
    fsdp_block_class: Optional[str] = None
    """The class name of the modules FSDP shards one by one (``GPT2Block``, ``LlamaDecoderLayer``), where the
    rule of ``parallelism`` finds none or the wrong ones (None: that rule)."""


@dataclass
class SearchSection:
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
    num_trials: int = field(default=18, metadata=check(between(1, MAX_TRIALS)))
    """Trials in total (at most 10 000, ``spec.checks.MAX_TRIALS``). At least one per batch size: each batch size is
    seeded (the middle alpha, and a
    warmup that grows with the batch: the middle of the range at ``base_batch``, an eighth of the range more
    per doubling above and less below, clipped to the range) so its curve point always exists."""
    metric: str = field(default="accuracy", metadata=check(METRIC_NAME))
    """Validation metric to compare: one the spec path computes (``BUILTIN_METRICS``: accuracy, for
    sequence-classification only; eval_loss; perplexity; bleu, seq2seq only, corpus BLEU of the generated eval
    targets through ``sacrebleu``, see the ``generation`` section; excess_loss, the built-in ``markov`` language only,
    nats of cross-entropy over the language's own entropy, mode min), or, with ``run_search``'s
    ``compute_metrics``, any key its dict returns (``f1``, ``worst_class_recall``; set ``mode`` to match)."""
    mode: Literal["max", "min"] = "max"
    """Whether a larger metric is better (checked for the loop's metrics; a ``compute_metrics`` key's is yours)."""
    tolerance: Optional[float] = field(default=None, metadata=check(within(0, 1, ends="[)")))
    """Turning-point tolerance: a batch is as good as the best while within this margin, in
    ``tolerance_unit``. Default 0.01 (0.01 nats, or 1 % of the best). For a loss metric it is branch mode's ε
    too (``branch.tolerance``): set either, not both apart (``spec.tolerance``)."""
    tolerance_unit: Literal["auto", "nats", "relative"] = "auto"
    """``auto``: a loss metric in nats (eval_loss, excess_loss, a ``compute_metrics`` key with ``loss`` in its name,
    mode min) reads ``tolerance`` as absolute nats, any other metric (accuracy, BLEU, perplexity) as a fraction of
    the best; ``nats`` (a loss metric only) or ``relative`` say which. Experiments recorded before this setting
    read as relative."""
    turning_point: Literal["monotone", "raw"] = "monotone"
    """How the turning point is read from each batch size's best: ``monotone`` walks their least-squares
    fit that never improves with batch size (at equal samples the reachable quality does not, by the
    empirical model of McCandlish et al.), so one lucky or unlucky batch size cannot end or extend the walk
    alone; ``raw`` walks the bests themselves. The summary holds both."""
    seed: int = field(default=0, metadata=check(between(0, SEED_MAX)))
    """Seed for the searcher, data order and model initialisation (0 to 2³²−1: numpy's and Optuna's range)."""
    strategy: Literal["tpe", "random", "grid", "bisect"] = "tpe"
    """How configurations are chosen: ``tpe`` (Optuna's multivariate TPE, the default), ``random``
    (Optuna's random sampler over the same space), ``grid``: the manual method, every batch size ×
    ``grid_points`` evenly spaced alphas × as many warmups (``num_trials`` is then that product), or ``bisect``:
    the search at its cost limit (``maths.bisection``): alpha chosen once among ``grid_points`` values at the
    walk's first batch (``maths.minimax_walk``; the grid's middle or just above) by synchronous halving at ASHA's
    first rung (``maths.halving``: every candidate waits there until all have reported; the prior goes on, the
    best other too only where it leads by more than ``tolerance``), warmup by the seed rule, then each batch
    trained once, the grid's smallest first and then by a minimax walk on the monotone reading (fewest runs in the
    worst case, then on average) until the answer and its neighbours are measured (``num_trials``,
    ``balance_batches`` and ``resources.max_concurrent_trials`` are not used)."""
    balance_batches: bool = True
    """With ``tpe`` or ``random`` (a grid is balanced anyway): the batch sizes take turns (round robin after
    the seeds), so their trial counts differ by at most one (12 trials over 5 batch sizes: 3, 3, 2, 2, 2),
    and alpha and warmup are chosen from that batch size's own trials (Optuna's TPE on a conditional
    space). Without it TPE also chooses the batch size and spends most trials where the
    metric is best, i.e. at small batches, which leaves the large batches' best configuration, and with
    it the turning point, less well estimated."""
    grid_points: int = field(default=3, metadata=check(between(1, MAX_GRID_POINTS)))
    """Points per range (alpha, warmup) of the ``grid`` strategy: 3 gives the ends and the middle (at most 100,
    ``spec.checks.MAX_GRID_POINTS``)."""
    early_stopping: bool = True
    """ASHA early stopping within each batch size; false trains every trial to the full budget."""
    repeats: int = field(default=1, metadata=check(a_count(MAX_REPEATS)))
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
    method: str = field(default=DEFAULT_METHOD, metadata=check(a_registered_method()))
    """One of ``records.method_registry``'s methods (``register_method`` adds one). ``scratch``: every candidate batch
    trains from initialisation to the full budget (the critical batch at
    the end of the budget). ``branch``: one trunk run at a small batch saves checkpoints, and from each, branches
    at larger batches train for a window (the ``branch:`` section): the critical batch over the course of
    training, CBS(t) (Merrill et al. 2025), and a batch-size schedule that follows it. ``ladder``: every batch
    trains at a constant LR to a fraction of the budget (the ``ladder:`` section), B_crit is read at several data
    sizes and extrapolated to the full budget (the critical batch of the run you will train)."""


@dataclass
class GenerationSpec:
    """How a seq2seq model writes its evaluation targets for ``search.metric: bleu`` (not used otherwise):
    greedy by default, as cheap as BLEU gets, and the same for every batch size."""

    max_new_tokens: Optional[int] = field(default=None, metadata=check(between(1, MAX_SEQUENCE)))
    """Tokens the decoder may write per example, end-of-sequence included (None: ``data.max_target_length``)."""
    num_beams: int = field(default=1, metadata=check(at_least(1)))
    """Beam search width (1: greedy). Each beam multiplies evaluation's decoding cost."""


@dataclass
class AshaSpec:
    grace_period_samples: int = field(default=1024, metadata=check(between(1, MAX_SAMPLES)))
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
    search: SearchSection = field(default_factory=SearchSection)
    generation: GenerationSpec = field(default_factory=GenerationSpec)
    asha: AshaSpec = field(default_factory=AshaSpec)
    method_sections: dict[str, Any] = field(default_factory=default_sections)
    """Each registered method's own section by its key (``branch``, ``ladder``: ``spec.sections``), read with
    ``section``; in the YAML and ``cbs_spec.json`` each is a key of the spec's own, here between ``asha`` and
    ``resources``."""
    resources: ResourcesSpec = field(default_factory=ResourcesSpec)
    tracking: TrackingSpec = field(default_factory=TrackingSpec)
    storage_path: str = "~/ray_results"
    """Where Tune persists the experiment (a local path, shared filesystem or s3:// / gs:// URI)."""
    output_dir: Optional[str] = None
    """Where the report goes (default ./cbs_results/<name> for a from-scratch search, ./cbs_results/<name>-branch
    and ./cbs_results/<name>-ladder for the other methods, so that one never clears another's report)."""

    def section(self, key: str) -> Any:
        """The search method's section ``key`` (its settings dataclass, defined in its folder); a method registered
        after this spec was built gets its section's defaults."""
        if key not in self.method_sections:
            self.method_sections[key] = section_classes()[key]()
        return self.method_sections[key]

    # ---- derived values (valid only after validate()) -------------------------------------------
    @property
    def auto_batch_sizes(self) -> bool:
        return self.search.batch_sizes == "auto"

    @property
    def batch_sizes(self) -> list[int]:
        """The candidate batch sizes; with ``auto``, until the probe has run, just the probe's batch."""
        if self.auto_batch_sizes:
            return [self.training.base_batch]
        return expand_batch_sizes(self.search.batch_sizes)

    @property
    def results_dir(self) -> Path:
        """``output_dir``, else the method's own folder (``records.meta.default_report_dir``), its parents resolved
        but not the folder itself: a symbolic link planted there is seen, and refused, by the report's writer
        (``report.folder``), not followed."""
        if self.output_dir:
            return expand_user(self.output_dir, "output_dir").resolve()
        folder = default_report_dir(self.name, self.search.method)
        return folder.parent.resolve() / folder.name

    @property
    def storage_uri(self) -> str:
        if "://" in self.storage_path:
            return self.storage_path
        return str(expand_user(self.storage_path, "storage_path").resolve())


def dataloader_workers(training: TrainingSpec, use_gpu: bool) -> int:
    """The DataLoader worker processes a trial's worker runs: as set, else 2 on a GPU and 0 on a CPU."""
    if training.dataloader_workers is not None:
        return training.dataloader_workers
    return 2 if use_gpu else 0
