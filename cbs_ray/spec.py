"""The search spec: typed, documented, validated once at the edge.

A spec is a YAML file whose nested maps correspond one-to-one to the dataclasses below; every field has a
docstring and carries its unit in its name. ``SearchSpec()`` with no arguments *is* the embedded default:
a tiny BERT trained from its config on the built-in offline sentiment task, sized to finish on a 2-core
CPU in minutes. Loading never starts Ray and never touches the network; a bad spec raises ``SpecError``
whose message names the field (``training.budget_samples: must be ...``).
"""

from __future__ import annotations

import copy
import dataclasses
import math
import os
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Optional

import yaml

__all__ = ["SpecError", "SearchSpec", "ModelSpec", "DataSpec", "TrainingSpec", "SearchParams",
           "AshaSpec", "ResourcesSpec", "load_spec", "spec_from_dict", "spec_to_dict", "apply_overrides"]


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


@dataclass
class ModelSpec:
    name: Optional[str] = None
    """Hugging Face hub name or local directory of a pretrained model (e.g. ``bert-base-uncased``).
    Exactly one of ``name`` and ``config`` is set."""
    config: Optional[dict] = field(default_factory=lambda: dict(TINY_BERT))
    """Hugging Face config keys for a model trained from scratch; must contain ``model_type``."""
    tokenizer: Optional[str] = None
    """Hub name or local path of a tokenizer. Default: the model's own tokenizer for ``name``; for
    ``config``, a word-level tokenizer trained locally on the training text."""
    vocab_size: int = 2000
    """Vocabulary size of the locally trained tokenizer (ignored when a tokenizer is loaded)."""


@dataclass
class DataSpec:
    source: Literal["builtin", "hub", "files"] = "builtin"
    """Where the text comes from: the built-in offline task, ``load_dataset`` from the hub, or local files."""
    builtin_task: Literal["sentiment"] = "sentiment"
    """The built-in task: generated sentences whose label is whether positive words outnumber negative
    ones, with 5 % label noise (no download; see ``cbs_ray.data``)."""
    builtin_train_examples: int = 8192
    """Size of the generated training set."""
    builtin_eval_examples: int = 4096
    """Size of the generated evaluation set."""
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
    max_seq_length: int = 32
    """Tokens per example after truncation/padding."""
    max_train_examples: Optional[int] = None
    """Use only the first N training examples (None: all)."""
    max_eval_examples: Optional[int] = None
    """Use only the first N examples of the eval file/split (None: all). With ``holdout_examples`` that is
    the dev set; the held-out set the search selects on is sized by ``holdout_examples`` alone."""
    holdout_examples: Optional[int] = None
    """Hold N training examples out (a fixed random sample, never trained on) as the set the search
    selects on; the eval file/split then becomes the dev set, evaluated at the end of each trial and
    reported as ``dev_<metric>``. For dev sets whose sampling noise is as large as the differences between
    batch sizes (SST-2's 872 sentences: about 1.4 accuracy points of standard error). None: select on the
    eval file/split."""


@dataclass
class TrainingSpec:
    budget_samples: Optional[int] = 16384
    """Equal-sample budget: every trial trains on exactly this many samples, whatever its batch size."""
    budget_epochs: Optional[float] = None
    """Alternative to ``budget_samples``: epochs over the training set, rounded down to a whole number of
    ``eval_every_samples``. Set ``budget_samples: null`` to use it."""
    base_lr: float = 2.0e-3
    """Learning rate tuned at ``base_batch`` (B0); trials use base_lr · (B / B0) ** alpha."""
    base_batch: int = 16
    """B0: the batch size at which ``base_lr`` is right."""
    lr_decay: Literal["linear", "cosine", "constant"] = "linear"
    """Shape of the LR after warmup, reaching 0 at the end of the budget (except constant)."""
    optimizer: Literal["adamw", "lamb", "sgd"] = "adamw"
    """Optimizer: AdamW (betas 0.9/0.999), LAMB (layer-wise trust ratio for large batches, You et al.
    2020, from ``pytorch_optimizer``), or SGD with momentum 0.9."""
    label_smoothing: float = 0.0
    """Label smoothing of the training loss (0 = none); evaluation is never smoothed."""
    layer_lr_decay: float = 1.0
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
    dataloader_workers: Optional[int] = None
    """DataLoader worker processes (None: 2 on a GPU, so batches are ready while the device trains; 0 on a
    CPU, whose cores the trial's training uses)."""
    pin_memory: Optional[bool] = None
    """Page-locked host batches, copied to the GPU faster (None: on when ``resources.use_gpu``)."""
    persistent_workers: Optional[bool] = None
    """Keep the DataLoader's workers alive from one epoch to the next (None: whenever there are
    workers); needs DataLoader workers."""
    weight_decay: float = 0.01
    """Decoupled weight decay (not applied to biases and LayerNorm weights)."""
    grad_clip_norm: Optional[float] = 1.0
    """Clip the global gradient norm to this value (None: no clipping)."""
    divergence_factor: float = 10.0
    """A trial is stopped as diverged when a report interval's mean training loss exceeds this multiple
    of its first step's loss (besides any NaN/Inf loss or gradient norm)."""
    eval_every_samples: int = 2048
    """Report cadence: evaluate, report and checkpoint every this many samples. Must be a multiple of the
    largest batch size so every report lands on an exact sample milestone."""
    micro_batch_size: Optional[int] = 32
    """Cap on the per-worker micro-batch; larger batches use gradient accumulation (None: no cap). The
    default 32 also lets a single worker measure the gradient noise scale at B >= 64."""
    probe_micro_batch: bool = False
    """On GPU, find the largest per-worker micro-batch that fits (forward + backward + optimizer step at
    growing sizes, 10 % safety margin, minimum across workers, cached in ~/.cache/cbs_ray/) and use it as
    the cap, accumulating the rest. On CPU only with ``memory_limit_gb``, else skipped."""
    eval_batch_size: int = 256
    """Evaluation batch per worker. Lowered to the probed micro-batch where memory bounded the probe (a
    forward without gradients needs less memory than a training step of the same size)."""
    memory_limit_gb: Optional[float] = None
    """CPU workers: the resident memory (GiB) a worker process may peak at during a training step. With
    ``probe_micro_batch`` the probe plans the micro-batch within it (a CPU has no out-of-memory error to
    catch: sizes expected to exceed it are not run). Ignored on a GPU, whose memory is the limit."""
    noise_scale: bool = True
    """Estimate the gradient noise scale B_simple during training (McCandlish et al. 2018): needs more
    than one worker or gradient accumulation; costs one sum of squares per gradient bucket."""


@dataclass
class SearchParams:
    batch_sizes: Any = field(default_factory=lambda: {"min": 8, "max": 128})
    """Candidate batch sizes: a list of powers of two, ``{min: 8, max: 128}`` for every power of two in
    between, or ``auto``: a short probe run at ``base_batch`` measures the gradient noise scale and the
    grid is centred on it (B_simple/8 … B_simple·8)."""
    alpha_range: list = field(default_factory=lambda: [0.5, 1.0])
    """[low, high] of the LR-scaling exponent: 0.5 is the sqrt rule, 1.0 the linear rule."""
    warmup_fraction_range: list = field(default_factory=lambda: [0.0, 0.2])
    """[low, high] of warmup as a fraction of the trial's optimizer steps."""
    num_trials: int = 12
    """Trials in total. At least one per batch size: each batch size is seeded (the middle alpha, and a
    warmup that grows with the batch from the low end of the range at the smallest batch to the high end
    at the largest) so its curve point always exists."""
    metric: Literal["accuracy", "eval_loss", "perplexity"] = "accuracy"
    """Validation metric to compare (accuracy: sequence-classification only)."""
    mode: Literal["max", "min"] = "max"
    """Whether a larger metric is better."""
    tolerance: float = 0.01
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
    balance_batches: bool = False
    """With ``tpe`` or ``random`` (a grid is balanced anyway): the batch sizes take turns (round robin after
    the seeds), so their trial counts differ by at most one (12 trials over 5 batch sizes: 3, 3, 2, 2, 2),
    and alpha and warmup are chosen from that batch size's own trials (Optuna's TPE on a conditional
    space). Without it TPE also chooses the batch size and spends most trials where the
    metric is best, i.e. at small batches, which leaves the large batches' best configuration, and with
    it the turning point, less well estimated."""
    grid_points: int = 3
    """Points per range (alpha, warmup) of the ``grid`` strategy: 3 gives the ends and the middle."""
    early_stopping: bool = True
    """ASHA early stopping within each batch size; false trains every trial to the full budget."""
    repeats: int = 1
    """Runs per batch size of its finally selected configuration (the best at the full budget): with k > 1
    the best is re-trained k - 1 more times with other seeds, and the report uses the mean with its
    standard error, a range for the turning point and a verdict on whether the noise allows an answer."""


@dataclass
class AshaSpec:
    grace_period_samples: int = 4096
    """No trial is stopped before it has seen this many samples (ASHA's grace period)."""
    reduction_factor: int = 2
    """ASHA keeps the top 1/reduction_factor of trials at each rung (within one batch size)."""


@dataclass
class ResourcesSpec:
    workers_per_trial: int = 1
    """Data-parallel workers per trial (Ray Train TorchTrainer workers). One CPU worker runs in-process."""
    cpus_per_worker: int = 1
    """CPUs per worker; torch's thread count is set to this."""
    use_gpu: bool = False
    """One GPU per worker, NCCL backend (gloo on CPU)."""
    max_failures: int = 2
    """Restarts of a trial from its last checkpoint after a worker process dies (a spot node taken back,
    an out-of-memory kill); after that the trial is marked failed and the search goes on."""
    max_concurrent_trials: Optional[int] = None
    """Concurrent trials. Default: as many as the cluster's CPUs/GPUs fit when the search starts, so trials
    never wait on each other's workers. Set it on an autoscaling cluster, whose resources at the start
    (a CPU-only head, no GPU node yet) are not what it grows to."""


@dataclass
class SearchSpec:
    name: str = "tiny-bert-sentiment"
    """Experiment name: the results directory and the Tune experiment are named after it."""
    task: Literal["sequence-classification", "causal-lm"] = "sequence-classification"
    """What the model learns."""
    model: ModelSpec = field(default_factory=ModelSpec)
    data: DataSpec = field(default_factory=DataSpec)
    training: TrainingSpec = field(default_factory=TrainingSpec)
    search: SearchParams = field(default_factory=SearchParams)
    asha: AshaSpec = field(default_factory=AshaSpec)
    resources: ResourcesSpec = field(default_factory=ResourcesSpec)
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
    raw: dict = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise SpecError(f"--space: no such file: {path}")
        try:
            raw = yaml.safe_load(p.read_text()) or {}
        except yaml.YAMLError as e:
            raise SpecError(f"--space: {path} is not valid YAML ({str(e).splitlines()[0]})") from None
        if not isinstance(raw, dict):
            raise SpecError(f"--space: {path} must hold a mapping at the top level")
        base = p.parent
        # Relative data files are relative to the spec file, so a spec travels with its data.
        data = raw.get("data")
        if isinstance(data, dict):
            for key in ("train_file", "eval_file"):
                if isinstance(data.get(key), str) and not Path(data[key]).expanduser().is_absolute():
                    data[key] = str((base / data[key]).resolve())
    apply_overrides(raw, overrides)
    return spec_from_dict(raw)


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
    hint = typing.get_type_hints(cls).get(name)
    return hint if dataclasses.is_dataclass(hint) else None


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
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(raw) - names)
    if unknown:
        raise SpecError(f"{_join(where, unknown[0])}: unknown key (known: {', '.join(sorted(names))})")
    values = {}
    for key, value in raw.items():
        path = _join(where, key)
        hint = hints[key]
        if dataclasses.is_dataclass(hint):
            values[key] = _build(hint, value, path)
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
        if not value:
            raise SpecError("search.batch_sizes: empty list")
        for b in value:
            _check_power_of_two(b, "search.batch_sizes")
        if len(set(value)) != len(value):
            raise SpecError("search.batch_sizes: duplicate batch size")
        return sorted(value)
    raise SpecError(f"search.batch_sizes: expected a list or {{min, max}}, got {value!r}")


def _check_power_of_two(b: Any, path: str) -> None:
    if isinstance(b, bool) or not isinstance(b, int):
        raise SpecError(f"{path}: expected integer batch sizes, got {b!r}")
    if b <= 0:
        raise SpecError(f"{path}: batch size must be positive, got {b}")
    if b & (b - 1):
        raise SpecError(f"{path}: batch size must be a power of two, got {b}")


def _check_range(value: list, path: str, low: float, high: float) -> None:
    if (len(value) != 2 or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)):
        raise SpecError(f"{path}: expected [low, high], got {value!r}")
    if not (low <= value[0] <= value[1] <= high):
        raise SpecError(f"{path}: must satisfy {low} <= low <= high <= {high}, got {value!r}")


def dataloader_workers(training: TrainingSpec, use_gpu: bool) -> int:
    """The DataLoader worker processes a trial's worker runs: as set, else 2 on a GPU and 0 on a CPU."""
    if training.dataloader_workers is not None:
        return training.dataloader_workers
    return 2 if use_gpu else 0


def validate(spec: SearchSpec) -> None:
    """Semantic checks that need more than one field. Dataset-size checks happen in
    ``check_against_data`` once the data is known."""
    m, d, t, s, a, r = spec.model, spec.data, spec.training, spec.search, spec.asha, spec.resources
    if not spec.name or any(c in spec.name for c in "/\\ "):
        raise SpecError(f"name: must be a non-empty name without spaces or slashes, got {spec.name!r}")
    if (m.name is None) == (m.config is None):
        raise SpecError("model: set exactly one of model.name (pretrained) and model.config (from scratch)")
    if m.config is not None and "model_type" not in m.config:
        raise SpecError("model.config: must contain model_type (e.g. bert, gpt2)")
    if m.vocab_size < 10:
        raise SpecError(f"model.vocab_size: must be at least 10, got {m.vocab_size}")
    if d.source == "hub" and not d.hub_name:
        raise SpecError("data.hub_name: required when data.source is hub")
    if d.source == "files":
        for key in ("train_file", "eval_file"):
            value = getattr(d, key)
            if not value:
                raise SpecError(f"data.{key}: required when data.source is files")
            if not Path(value).expanduser().is_file():
                raise SpecError(f"data.{key}: no such file: {value}")
            if Path(value).suffix.lower() not in (".csv", ".tsv", ".json", ".jsonl", ".parquet"):
                raise SpecError(f"data.{key}: unsupported format {Path(value).suffix!r} "
                                "(csv, tsv, json, jsonl, parquet)")
    if d.max_seq_length < 4:
        raise SpecError(f"data.max_seq_length: must be at least 4, got {d.max_seq_length}")
    for key in ("builtin_train_examples", "builtin_eval_examples"):
        if getattr(d, key) < 1:
            raise SpecError(f"data.{key}: must be positive")
    for key in ("max_train_examples", "max_eval_examples", "holdout_examples"):
        if getattr(d, key) is not None and getattr(d, key) < 1:
            raise SpecError(f"data.{key}: must be positive")

    batches = spec.batch_sizes
    largest = batches[-1]
    if spec.auto_batch_sizes:  # the probe trains at training.base_batch: name that field, not batch_sizes
        where = "training.base_batch (the probe's batch with search.batch_sizes: auto)"
        _check_power_of_two(t.base_batch, where)
        if t.base_batch % r.workers_per_trial:
            raise SpecError(f"{where}: {t.base_batch} does not split over resources.workers_per_trial="
                            f"{r.workers_per_trial} workers")
        if t.eval_every_samples <= 0 or t.eval_every_samples % t.base_batch:
            raise SpecError(f"training.eval_every_samples: must be a positive multiple of {where}, "
                            f"{t.base_batch}, got {t.eval_every_samples}")
    if (t.budget_samples is None) == (t.budget_epochs is None):
        raise SpecError("training: set exactly one of budget_samples and budget_epochs")
    if t.budget_epochs is not None and t.budget_epochs <= 0:
        raise SpecError(f"training.budget_epochs: must be positive, got {t.budget_epochs}")
    if t.eval_every_samples <= 0 or t.eval_every_samples % largest:
        raise SpecError(f"training.eval_every_samples: must be a positive multiple of the largest batch "
                        f"size {largest}, got {t.eval_every_samples}")
    if t.budget_samples is not None:
        _check_budget(spec, t.budget_samples)
    for key in ("base_lr",):
        v = getattr(t, key)
        if not (v > 0 and math.isfinite(v)):
            raise SpecError(f"training.{key}: must be a positive number, got {v}")
    if t.base_batch <= 0:
        raise SpecError(f"training.base_batch: must be positive, got {t.base_batch}")
    if t.weight_decay < 0:
        raise SpecError(f"training.weight_decay: must be >= 0, got {t.weight_decay}")
    if t.grad_clip_norm is not None and t.grad_clip_norm <= 0:
        raise SpecError(f"training.grad_clip_norm: must be positive or null, got {t.grad_clip_norm}")
    if t.divergence_factor <= 1:
        raise SpecError(f"training.divergence_factor: must be greater than 1, got {t.divergence_factor}")
    if not 0 <= t.label_smoothing < 1:
        raise SpecError(f"training.label_smoothing: must be in [0, 1), got {t.label_smoothing}")
    if not 0 < t.layer_lr_decay <= 1:
        raise SpecError(f"training.layer_lr_decay: must be in (0, 1], got {t.layer_lr_decay}")
    if t.dataloader_workers is not None and t.dataloader_workers < 0:
        raise SpecError(f"training.dataloader_workers: must be >= 0, got {t.dataloader_workers}")
    if t.persistent_workers and dataloader_workers(t, spec.resources.use_gpu) == 0:
        raise SpecError("training.persistent_workers: needs DataLoader workers; set training.dataloader_workers "
                        "above 0 (it is 0 on a CPU unless set)")
    if t.eval_batch_size < 1:
        raise SpecError(f"training.eval_batch_size: must be at least 1, got {t.eval_batch_size}")
    if t.memory_limit_gb is not None and not t.memory_limit_gb > 0:
        raise SpecError(f"training.memory_limit_gb: must be positive or null, got {t.memory_limit_gb}")
    if t.micro_batch_size is not None and t.micro_batch_size <= 0:
        raise SpecError(f"training.micro_batch_size: must be positive, got {t.micro_batch_size}")

    _check_range(s.alpha_range, "search.alpha_range", 0.0, 1.0)
    _check_range(s.warmup_fraction_range, "search.warmup_fraction_range", 0.0, 1.0)
    if r.max_failures < 0:
        raise SpecError(f"resources.max_failures: must be >= 0, got {r.max_failures}")
    if s.grid_points < 1:
        raise SpecError(f"search.grid_points: must be at least 1, got {s.grid_points}")
    if s.num_trials < len(batches) and s.strategy != "grid":
        raise SpecError(f"search.num_trials: must be at least the number of batch sizes ({len(batches)}) "
                        f"so every batch size is trained, got {s.num_trials}")
    if s.metric == "accuracy" and spec.task != "sequence-classification":
        raise SpecError("search.metric: accuracy needs task sequence-classification; use eval_loss")
    expected_mode = "max" if s.metric == "accuracy" else "min"
    if s.mode != expected_mode:
        raise SpecError(f"search.mode: {s.metric} is better when it is {'higher' if expected_mode == 'max' else 'lower'}; "
                        f"use mode {expected_mode}")
    if s.repeats < 1:
        raise SpecError(f"search.repeats: must be at least 1, got {s.repeats}")
    if s.strategy == "grid" and s.early_stopping:
        raise SpecError("search.early_stopping: the grid strategy trains every point to the full budget; "
                        "set search.early_stopping=false")
    if not 0 <= s.tolerance < 1:
        raise SpecError(f"search.tolerance: must be in [0, 1), got {s.tolerance}")
    if a.reduction_factor < 2:
        raise SpecError(f"asha.reduction_factor: must be at least 2, got {a.reduction_factor}")
    if a.grace_period_samples <= 0 or a.grace_period_samples % t.eval_every_samples:
        raise SpecError(f"asha.grace_period_samples: must be a positive multiple of "
                        f"training.eval_every_samples ({t.eval_every_samples}), got {a.grace_period_samples}")
    if r.workers_per_trial < 1:
        raise SpecError(f"resources.workers_per_trial: must be at least 1, got {r.workers_per_trial}")
    if r.cpus_per_worker < 1:
        raise SpecError(f"resources.cpus_per_worker: must be at least 1, got {r.cpus_per_worker}")
    if r.max_concurrent_trials is not None and r.max_concurrent_trials < 1:
        raise SpecError("resources.max_concurrent_trials: must be at least 1")
    for b in batches:
        if b % r.workers_per_trial:
            raise SpecError(f"search.batch_sizes: {b} does not split over "
                            f"resources.workers_per_trial={r.workers_per_trial} workers")


def _check_budget(spec: SearchSpec, budget: int) -> None:
    t, largest = spec.training, spec.batch_sizes[-1]
    if budget < largest:
        raise SpecError(f"training.budget_samples: {budget} is smaller than the largest batch size {largest}")
    if budget % t.eval_every_samples:
        raise SpecError(f"training.budget_samples: must be a multiple of training.eval_every_samples "
                        f"({t.eval_every_samples}), got {budget}")
    if spec.asha.grace_period_samples > budget:  # with batch_sizes: auto too, or it fails after the probe
        raise SpecError(f"asha.grace_period_samples: {spec.asha.grace_period_samples} exceeds the budget {budget}")


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
    """The equal-sample budget in samples, resolving ``budget_epochs`` against the training set size,
    and checking batch sizes against the data."""
    largest = spec.batch_sizes[-1]
    if largest > train_examples:
        raise SpecError(f"search.batch_sizes: largest batch {largest} exceeds the {train_examples} "
                        "training examples")
    t = spec.training
    if t.budget_samples is not None:
        return t.budget_samples
    samples = int(t.budget_epochs * train_examples) // t.eval_every_samples * t.eval_every_samples
    if samples <= 0:
        raise SpecError(f"training.budget_epochs: {t.budget_epochs} epochs of {train_examples} examples is "
                        f"less than one report interval ({t.eval_every_samples} samples)")
    _check_budget(spec, samples)
    return samples
