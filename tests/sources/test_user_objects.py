"""The objects path (issue 16): ``run_search(spec, model_init=…, train_dataset=…, eval_dataset=…,
data_collator=…, compute_metrics=…)``. Bad input is one error naming the argument with no Ray started;
the loop trains the user's model exactly (accumulation, a token-mean loss through ``num_items_in_batch``,
evaluation gathered over two gloo ranks); both examples run end to end on a real local Ray, in-process and
on 2 gloo workers, and an objects experiment resumes in Python but not from the command line."""

import json

import pytest
import torch

from cbs_ray.records.storage import read_meta, write_meta
from cbs_ray.sources.user_objects import user_objects
from cbs_ray.spec.errors import SpecError
from cbs_ray.spec.load import load_spec, spec_to_dict
from cbs_ray.train.config import TrialConfig
from cbs_ray.train.loop import train_loop
from cbs_ray.tune.api import prepare, resume_search, run_search
from helpers.examples import load_example
from helpers.training import RecordingSession

plain = load_example("plain_torch")
SMALL = ["search.batch_sizes=[16, 32]", "search.num_trials=2", "training.budget_samples=256",
         "training.eval_every_samples=128", "asha.grace_period_samples=128"]


def train_objects(objects: dict, overrides=(), *, batch: int = 32, alpha: float = 1.0, session=None):
    """One configuration of the plain example's spec + ``overrides`` through the real loop, in-process."""
    spec = plain.search_spec(SMALL + list(overrides))
    prepared = prepare(spec, user_objects(**objects))
    data, budget, config = prepared.data, prepared.budget_samples, prepared.model_config
    cfg = TrialConfig.from_tune(spec, {"log2_batch": batch.bit_length() - 1, "alpha": alpha, "warmup_fraction": 0.0},
                                budget_samples=budget, model_config=config)
    session = session or RecordingSession()
    train_loop(cfg, data, session)
    return session


# ---- bad input: one line naming the argument, before any Ray process starts ---------------------------

class Returns:
    """A model_init stand-in: a module whose forward returns ``output(logits, labels)``."""

    def __init__(self, output):
        self.output = output

    def __call__(self):
        output = self.output

        class Odd(plain.MLP):
            def forward(self, features, labels=None):
                return output(self.net(features), labels)

        return Odd()


def _raise(*_):
    raise RuntimeError("boom")


def _bad(**changes):
    objects = plain.objects(train_examples=256, eval_examples=64)
    objects.update(changes)
    return objects


class Renamed(torch.utils.data.Dataset):
    def __init__(self, dataset, key):
        self.dataset, self.key = dataset, key

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, i):
        x, y = self.dataset[i]
        return {self.key: x, "labels": y}


class Overstated(torch.utils.data.Dataset):
    """Says it holds 2048 items and holds 256 (issue 40): every trial failed at its end."""

    def __init__(self, dataset):
        self.dataset = dataset

    def __len__(self):
        return 2048

    def __getitem__(self, i):
        return self.dataset[i]


class Stream(torch.utils.data.IterableDataset):
    def __iter__(self):
        return iter([])


def _spec_file(tmp_path, text: str) -> str:
    path = tmp_path / "space.yaml"
    path.write_text(text + "\nsearch: {batch_sizes: [16, 32], num_trials: 2}\n"
                           "training: {budget_samples: 256, eval_every_samples: 128}\nasha: {grace_period_samples: 128}\n")
    return str(path)


BAD_INPUT = {
    "model_init raises": (_bad(model_init=_raise), "model_init: raised RuntimeError: boom"),
    "model_init returns no Module": (_bad(model_init=lambda: {"net": 1}),
                                     "model_init: must return a torch.nn.Module, returned a dict"),
    "a model, not model_init": (_bad(model_init=plain.MLP()), "model_init: must be a function that returns a fresh"),
    # The column forward does not take is dropped before the collator (issue 28), and the error says so.
    "the model rejects the batch": (_bad(train_dataset=Renamed(plain.Blobs(256, seed=1), "inputs"),
                                         data_collator=None),
                                    ("train_dataset: the model rejects a batch with columns labels: TypeError: "
                                     "MLP.forward() missing 1 required positional argument: 'features' (dropped "
                                     "before the collator: inputs, which MLP.forward does not take)")),
    "no loss in the output": (_bad(model_init=Returns(lambda logits, labels: {"logits": logits})),
                              "model_init: the model's output has no loss"),
    "compute_metrics raises": (_bad(compute_metrics=_raise), "compute_metrics: raised RuntimeError: boom"),
    "compute_metrics lacks the metric": (_bad(compute_metrics=lambda p: {"f1": 0.5}),
                                         "compute_metrics: returned no 'accuracy' (search.metric); it returned 'f1'"),
    "compute_metrics returns NaN": (_bad(compute_metrics=lambda p: {"accuracy": float("nan")}),
                                    "compute_metrics: 'accuracy' must be a finite number, got nan"),
    "no compute_metrics for accuracy": (_bad(compute_metrics=None), "compute_metrics: required for search.metric accuracy"),
    "empty training set": (_bad(train_dataset=plain.Blobs(0, seed=1)), "train_dataset: is empty"),
    "empty eval set": (_bad(eval_dataset=plain.Blobs(0, seed=2)), "eval_dataset: is empty"),
    "training set below the largest batch": (_bad(train_dataset=plain.Blobs(20, seed=1)),
                                             "train_dataset: 20 items, fewer than the largest batch size 32"),
    "eval_dataset missing": (_bad(eval_dataset=None), "eval_dataset: required with model_init, train_dataset"),
    "an iterable dataset": (_bad(train_dataset=Stream()),
                            "train_dataset: must be a map-style dataset"),
    "the default collator on tuples": (_bad(data_collator=None), "train_dataset (the default collator"),
    "a __len__ that overstates": (_bad(train_dataset=Overstated(plain.Blobs(256, seed=1))),
                                  "train_dataset: its __len__ says 2048 items, but item 2047 cannot be read"),
}


@pytest.fixture
def no_ray(monkeypatch):
    """Fails the test if the search gets as far as starting Ray."""
    import ray

    from cbs_ray.tune import driver

    def refuse(*_, **__):
        raise AssertionError("Ray would start")

    monkeypatch.setattr(driver, "ray_session", refuse)  # where every search method starts Ray
    yield
    assert not ray.is_initialized()


@pytest.mark.parametrize("objects,message", list(BAD_INPUT.values()), ids=list(BAD_INPUT))
def test_bad_objects_are_one_error_naming_the_argument_before_ray(objects, message, no_ray):
    with pytest.raises(SpecError) as error:
        run_search(plain.search_spec(SMALL), **objects)
    assert str(error.value).startswith(message), str(error.value)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("section,message", [
    ("model: {name: some-org/some-model, config: null}",
     "model_init: the spec names a model too (model.name='some-org/some-model', model.config=None)"),
    ("data: {source: hub, hub_name: glue, hub_config: sst2}",
     "train_dataset/eval_dataset: the spec names data too (data.source='hub', data.hub_name='glue'"),
], ids=["model", "data"])
def test_a_spec_file_naming_what_an_object_gives_is_an_error_naming_both(tmp_path, section, message, no_ray):
    spec = load_spec(_spec_file(tmp_path, section))
    with pytest.raises(SpecError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        run_search(spec, **_bad())


def test_spec_options_the_objects_cannot_take_are_named(no_ray):
    for option, message in [("training.label_smoothing=0.1", "training.label_smoothing: the model from model_init"),
                            ("training.gradient_checkpointing=true", "training.gradient_checkpointing: the Odd"),
                            ("training.layer_lr_decay=0.8", "training.layer_lr_decay: needs a model whose config")]:
        objects = _bad(model_init=Returns(lambda logits, labels: {
            "loss": torch.nn.functional.cross_entropy(logits, labels), "logits": logits}))
        with pytest.raises(SpecError, match="^" + message):
            run_search(plain.search_spec(SMALL + [option]), **objects)


def test_the_command_line_cannot_resume_an_objects_experiment_and_says_so_in_one_line(tmp_path, capsys):
    import ray

    from cbs_ray.cli import search_main
    from cbs_ray.sources.object_checks import objects_meta

    spec = plain.search_spec(SMALL)
    write_meta(str(tmp_path), {"name": spec.name, "metric": "accuracy", "mode": "max", "budget_samples": 256,
                               "tolerance": 0.01, "spec": spec_to_dict(spec),
                               **objects_meta(user_objects(**plain.objects(256, 64)))})
    assert read_meta(str(tmp_path))["user_objects"]["model_init"].endswith("plain_torch.MLP")
    assert search_main(["--resume", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: --resume: {tmp_path} was run with Python objects")
    assert "the command line cannot rebuild" in err and "resume_search(path, model_init=" in err
    # And the other way round: objects for an experiment that ran on its spec's own model and data.
    meta = read_meta(str(tmp_path))
    del meta["user_objects"]
    write_meta(str(tmp_path), meta)
    with pytest.raises(SpecError, match="^model_init: .* was run on its spec's own model and data"):
        resume_search(str(tmp_path), **plain.objects(256, 64))
    assert not ray.is_initialized()


@pytest.mark.parametrize("name", ["hf_pipeline", "plain_torch"])
def test_every_example_passes_the_checks_before_ray_as_shipped(name):
    """Each example's own spec and objects, as ``python examples/<name>.py`` runs them, up to Ray."""
    example = load_example(name)
    objects = example.objects()
    prepared = prepare(example.search_spec(), user_objects(**objects))
    data, budget, config = prepared.data, prepared.budget_samples, prepared.model_config
    assert budget == example.search_spec().training.budget_samples and data.train_examples == len(objects["train_dataset"])
    assert (config is not None) == (name == "hf_pipeline")  # an HF model's config; none for the MLP


# ---- the loop on the user's objects, in-process -----------------------------------------------------

def test_the_plain_example_trains_and_reports_its_own_metrics():
    reports = train_objects(plain.objects(train_examples=512, eval_examples=101)).reports
    assert [r["samples_seen"] for r in reports] == [128, 256]
    last = reports[-1]
    assert 0.0 <= last["accuracy"] <= 1.0 and 0.0 <= last["worst_class_recall"] <= 1.0  # compute_metrics'
    assert last["eval_examples"] == 101 and last["eval_loss"] > 0 and not last["diverged"]
    assert last["accuracy"] > 0.5  # four classes: learned something in 256 samples


def test_reports_before_the_last_evaluate_the_first_examples_of_the_users_eval_set():
    """training.eval_subset_examples on the user's objects: 32 of 101 at 128 samples, compute_metrics on those 32
    alone, all 101 at the last report."""
    seen = []

    def counting(prediction):
        seen.append(len(prediction.label_ids))
        return plain.compute_metrics(prediction)

    objects = {**plain.objects(train_examples=512, eval_examples=101), "compute_metrics": counting}
    reports = train_objects(objects, ["training.eval_subset_examples=32"]).reports
    # (the first call is the driver's check of compute_metrics on one micro-batch)
    assert [r["eval_examples"] for r in reports] == [32, 101] and seen[-2:] == [32, 101]


def test_search_metric_may_be_any_key_compute_metrics_returns_and_only_then():
    reports = train_objects(plain.objects(train_examples=512, eval_examples=101),
                            ["search.metric=worst_class_recall", "search.mode=max"]).reports
    assert 0.0 <= reports[-1]["worst_class_recall"] <= 1.0
    # The spec's own model and data report only the loop's metrics: another name is one line naming the fix.
    with pytest.raises(SpecError, match="^search.metric: f1 is not one the spec's model and data report .*"
                                        "compute_metrics"):
        prepare(load_spec(None, ["search.metric=f1"]))
    with pytest.raises(SpecError, match="^search.metric: must be a metric's name"):
        load_spec(None, ["search.metric='f1 score'"])


def test_four_micro_batches_update_like_one_batch_of_the_users_model():
    objects = plain.objects(train_examples=256, eval_examples=64)
    whole = train_objects(objects, ["training.micro_batch_size=32", "training.optimizer=sgd"])
    split = train_objects(objects, ["training.micro_batch_size=8", "training.optimizer=sgd"])
    assert (whole.reports[0]["accumulation"], split.reports[0]["accumulation"]) == (1, 4)
    for name, value in whole.weights[-1].items():
        assert torch.allclose(value, split.weights[-1][name], atol=2e-6), name


def test_the_micro_batch_probe_trains_on_copies_of_the_users_longest_item(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))  # the probe cache (~/.cache/cbs_ray) starts empty, in tmp_path
    batches = []

    class Longest(torch.utils.data.Dataset):
        """Blobs whose item 5 is its longest: 8 zeros after its features (which the collator drops)."""

        def __init__(self, size):
            self.blobs = plain.Blobs(size, seed=1)

        def __len__(self):
            return len(self.blobs)

        def __getitem__(self, i):
            x, y = self.blobs[i]
            return (torch.nn.functional.pad(x, (0, 8)) if i == 5 else x), y

    def padding_collate(items):
        batches.append(items)
        return plain.collate([(x[:plain.DIM], y) for x, y in items])

    objects = {**plain.objects(train_examples=256, eval_examples=64), "train_dataset": Longest(256),
               "data_collator": padding_collate}
    reports = train_objects(objects, ["training.probe_micro_batch=true", "training.memory_limit_gb=64"]).reports
    longest = Longest(256)[5][0]
    probed = [len(items) for items in batches if all(torch.equal(x, longest) for x, _ in items)]
    # Powers of two up to the probe's limit (the largest batch, 32), each with the 10 % margin: ceil(p / 0.9).
    assert probed == [2, 3, 5, 9, 18, 36]
    assert reports[0]["micro_batch"] == 32
    key, = json.loads((tmp_path / ".cache" / "cbs_ray" / "micro_batch.json").read_text())
    assert key.startswith("model_init:cbs_example_plain_torch.MLP:") and "|seq=" in key


class Tokens(torch.utils.data.Dataset):
    """Sequences of 2 to 12 tokens, padded to 12 with labels -100: micro-batches of unequal token counts."""

    def __init__(self, size: int):
        g = torch.Generator().manual_seed(3)
        self.ids = torch.randint(1, 50, (size, 12), generator=g)
        self.lengths = torch.randint(2, 13, (size,), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        labels = self.ids[i].clone()
        labels[self.lengths[i]:] = -100
        return {"input_ids": self.ids[i], "labels": labels}


class TokenModel(torch.nn.Module):
    """A per-token classifier whose loss is the mean over the batch's target tokens (a causal LM's kind)."""

    def __init__(self):
        super().__init__()
        self.embed, self.head = torch.nn.Embedding(50, 8), torch.nn.Linear(8, 50)

    def forward(self, input_ids, labels):
        logits = self.head(self.embed(input_ids))
        return {"loss": torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100),
                "logits": logits}


def count_tokens(items):
    from transformers import default_data_collator

    batch = default_data_collator(items)
    batch["num_items_in_batch"] = (batch["labels"] != -100).sum()
    return batch


class TargetsModel(TokenModel):
    """TokenModel taking its labels as ``targets``: a batch without ``labels`` has nothing the loop can count."""

    def forward(self, input_ids, targets):
        return super().forward(input_ids, targets)


def as_targets(items):
    from transformers import default_data_collator

    batch = default_data_collator(items)
    batch["targets"] = batch.pop("labels")
    return batch


@pytest.mark.parametrize("collator,model,exact", [(count_tokens, TokenModel, True), (None, TokenModel, True),
                                                  (as_targets, TargetsModel, False)],
                         ids=["num_items_in_batch", "labels_counted", "nothing_to_count"])
def test_a_token_mean_loss_accumulates_exactly_with_its_target_tokens_counted(collator, model, exact, capsys):
    """Issue 28: HF's collators return no ``num_items_in_batch``; the loop counts the labels other than -100
    itself, as HF's Trainer does, so a token-mean loss accumulates exactly. Only a batch with neither is a
    mean of micro-batch token means, and the driver says so once."""
    objects = {"model_init": model, "train_dataset": Tokens(256), "eval_dataset": Tokens(64),
               "data_collator": collator}
    common = ["search.metric=eval_loss", "search.mode=min", "training.optimizer=sgd", "training.grad_clip_norm=null",
              "training.base_lr=0.5"]  # SGD steps large enough that a mean of token means shows
    whole = train_objects(objects, common + ["training.micro_batch_size=32"])
    capsys.readouterr()
    split = train_objects(objects, common + ["training.micro_batch_size=8"])
    close = all(torch.allclose(value, split.weights[0][name], atol=2e-6) for name, value in whole.weights[0].items())
    # Counted in tokens, 4 micro-batches of 8 are one step of 32; counted in examples, a mean of token means.
    assert close == exact
    said = "weighs each by its examples: exact for a loss that is a mean over examples, not for one" in \
        capsys.readouterr().out
    assert said == (not exact)
    assert whole.reports[-1]["perplexity"] > 1 and "accuracy" not in whole.reports[-1]


def _gathered_on_two_gloo_ranks(rank: int, port: int, out: str) -> None:
    """One of two gloo ranks: the loop on the plain example, an eval set of 101 (uneven shards) whose
    compute_metrics checks that it sees every label once, in the eval set's order."""
    import torch.distributed as dist

    from helpers.gloo import GlooCapture
    from helpers.gloo import join_gloo as _join_gloo

    _join_gloo(rank, port)
    objects = plain.objects(train_examples=512, eval_examples=101)
    expected = objects["eval_dataset"].labels.numpy()

    def in_order(prediction):
        metrics = plain.compute_metrics(prediction)
        metrics["in_order"] = float(len(prediction.label_ids) == 101 and (prediction.label_ids == expected).all()
                                    and prediction.predictions.shape == (101, plain.CLASSES))
        return metrics

    session = train_objects({**objects, "compute_metrics": in_order}, ["resources.workers_per_trial=2"],
                            session=GlooCapture())
    torch.save(session.reports, f"{out}.{rank}")
    dist.destroy_process_group()


@pytest.mark.multiproc
def test_evaluation_gathers_every_ranks_predictions_in_order(tmp_path):
    from helpers.gloo import free_port as _free_port

    out = str(tmp_path / "reports")
    torch.multiprocessing.spawn(_gathered_on_two_gloo_ranks, args=(_free_port(), out), nprocs=2)
    ranks = [torch.load(f"{out}.{rank}", weights_only=False) for rank in (0, 1)]
    assert ranks[0][-1]["workers"] == 2 and ranks[0][-1]["eval_examples"] == 101
    assert all(r["in_order"] == 1.0 for r in ranks[0])
    # Every rank reports the same metrics (rank 0 computes them and sends them).
    assert [r["accuracy"] for r in ranks[0]] == [r["accuracy"] for r in ranks[1]]


# ---- issue 28: a held-out Hugging Face user's run ------------------------------------------------------

def tiny_gpt2():
    """A fresh 1-layer, 16-wide GPT-2 (``GPT2LMHeadModel``: a causal LM whose class name names no loss)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(GPT2Config(vocab_size=50, n_positions=16, n_embd=16, n_layer=1, n_head=2,
                                      resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))


def test_a_causal_lms_accumulated_gradient_is_its_whole_batchs_with_the_labels_counted_after_the_shift():
    """Two micro-batches holding 3 and 11 target tokens (labels other than -100 after the causal shift), as
    HF's DataCollatorForLanguageModeling gives them (no num_items_in_batch): each adds its mean loss × its
    counted tokens, the step divides by all of them (``train.loop._accumulate_gradients``), and the gradient
    is the one batch of both's."""
    torch.manual_seed(0)
    model = tiny_gpt2()
    objects = prepare(plain.search_spec(SMALL + ["search.metric=eval_loss", "search.mode=min"]),
                      user_objects(model_init=tiny_gpt2, train_dataset=Tokens(64), eval_dataset=Tokens(16))).data
    assert objects.label_shift and objects.model_class == "GPT2LMHeadModel"
    ids = torch.randint(1, 50, (4, 12), generator=torch.Generator().manual_seed(1))
    labels = ids.clone()
    labels[0, 3:], labels[1, 2:], labels[2, 7:], labels[3, 6:] = -100, -100, -100, -100  # after the shift: 2 + 1, 6 + 5
    halves = [{"input_ids": ids[:2], "labels": labels[:2]}, {"input_ids": ids[2:], "labels": labels[2:]}]
    counts = [objects.items_in(b) for b in halves]
    assert counts == [3, 11]

    def gradient(loss):
        model.zero_grad()
        loss.backward()
        return torch.cat([p.grad.flatten() for p in model.parameters()])

    whole = gradient(model(input_ids=ids, labels=labels).loss)
    accumulated = gradient(sum(objects.summed_loss(model, b, None, n) for b, n in zip(halves, counts)) / sum(counts))
    assert torch.allclose(whole, accumulated, atol=1e-6)
    # Counted unshifted (one token more per row) the weights are off, and so is the gradient.
    unshifted = [int((b["labels"] != -100).sum()) for b in halves]
    off = gradient(sum(objects.summed_loss(model, b, None, n) for b, n in zip(halves, unshifted)) / sum(unshifted))
    assert not torch.allclose(whole, off, atol=1e-6)


def test_the_experiment_is_named_after_the_models_class_unless_the_spec_names_it(monkeypatch, tmp_path):
    """Issue 28: with the default spec's name the experiment was tiny-bert-sentiment-<date>, the demo's, and its
    report went to ./cbs_results/tiny-bert-sentiment/."""
    from cbs_ray.tune import driver

    ran = {}
    monkeypatch.setattr(driver, "run_method", lambda method, spec, prepared, *, out, **_: ran.update(name=spec.name,
                                                                                                       out=out))
    monkeypatch.chdir(tmp_path)
    common = ["search.batch_sizes=[16, 32]", "search.num_trials=2", "training.budget_samples=256",
              "training.eval_every_samples=128", "asha.grace_period_samples=128", f"storage_path={tmp_path}"]
    run_search(load_spec(None, common), **plain.objects(256, 64))
    assert ran == {"name": "mlp", "out": tmp_path / "cbs_results" / "mlp"}
    run_search(load_spec(None, common + ["name=my-search"]), **plain.objects(256, 64))
    assert ran["name"] == "my-search"
    hf = load_example("hf_pipeline")
    run_search(load_spec(None, common), **hf.objects(256, 64))
    assert ran["name"] == "bert-for-sequence-classification"


def test_model_init_may_take_the_trial_as_hf_trainers_does():
    """Issue 28: ``model_init(trial)``, HF's other form, was refused (called with nothing)."""
    trials = []

    def model_init(trial):
        trials.append(trial)
        return plain.MLP()

    reports = train_objects({**plain.objects(256, 64), "model_init": model_init}, batch=32, alpha=0.5).reports
    assert reports[-1]["samples_seen"] == 256
    checked, trained = trials  # the driver's check, then the trial's worker
    assert checked["batch_size"] == 16 and checked["alpha"] == 0.625  # the smallest batch's seeded point
    assert (trained["batch_size"], trained["alpha"], trained["seed"]) == (32, 0.5, 0)
    assert trained["peak_lr"] == pytest.approx(plain.search_spec(SMALL).training.base_lr * 2 ** 0.5)
    with pytest.raises(SpecError, match=r"^model_init: takes 2 arguments; it must take none or one, the trial"):
        prepare(plain.search_spec(SMALL), user_objects(**{**plain.objects(256, 64), "model_init": lambda a, b: None}))


class WithText(torch.utils.data.Dataset):
    """Tokenized rows that kept their ``text`` column, as a pipeline's ``Dataset.map`` leaves it."""

    def __init__(self, hf, count: int, seed: int, tokenizer):
        texts, labels = hf.weather_reports(count, seed=seed)
        self.rows = [{"text": t, "label": y, **tokenizer(t, truncation=True, max_length=hf.MAX_LENGTH)}
                     for t, y in zip(texts, labels)]

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return self.rows[i]


def test_a_leftover_string_column_is_dropped_before_the_collator_as_hf_trainer_does(capsys):
    """Issue 28: a ``text`` column reached HF's padding collator, whose error advised truncation and padding."""
    from transformers import DataCollatorWithPadding

    hf = load_example("hf_pipeline")
    tokenizer = hf.train_tokenizer(hf.weather_reports(512, seed=1)[0])
    objects = {**hf.objects(256, 64), "train_dataset": WithText(hf, 256, 1, tokenizer),
               "eval_dataset": WithText(hf, 64, 2, tokenizer), "data_collator": DataCollatorWithPadding(tokenizer)}
    spec = hf.search_spec(["search.batch_sizes=[16, 32]", "search.num_trials=2", "training.budget_samples=256",
                           "training.eval_every_samples=128", "asha.grace_period_samples=128"])
    prepared = prepare(spec, user_objects(**objects))
    data, _, _ = prepared.data, prepared.budget_samples, prepared.model_config
    out = capsys.readouterr().out
    assert ("train_dataset: dropping the column text, which BertForSequenceClassification.forward does not take (as "
            "HF Trainer's remove_unused_columns)") in out and "eval_dataset: dropping the column text" in out
    batch = data.collate([data.train_dataset[i] for i in range(4)])
    assert set(batch) == {"input_ids", "attention_mask", "labels"}
    # A collator that needs the column (it reads the text itself) keeps it.
    needs_text = {**objects, "data_collator": lambda items: DataCollatorWithPadding(tokenizer)(
        [{**tokenizer(item["text"]), "label": item["label"]} for item in items])}
    prepared = prepare(spec, user_objects(**needs_text))
    data, _, _ = prepared.data, prepared.budget_samples, prepared.model_config
    assert data.columns is None and "dropping" not in capsys.readouterr().out


def test_preprocess_logits_for_metrics_runs_per_eval_batch_before_gathering():
    """Issue 28: HF's argument, so that an LM's compute_metrics need not gather the whole eval set's logits."""
    seen = []

    def argmax(logits, labels):
        seen.append((tuple(logits.shape), labels is not None))
        return logits.argmax(-1)

    def accuracy(prediction):
        seen.append(("metrics", prediction.predictions.shape, str(prediction.predictions.dtype)))
        return {"accuracy": float((prediction.predictions == prediction.label_ids).mean())}

    objects = {**plain.objects(256, 101), "compute_metrics": accuracy, "preprocess_logits_for_metrics": argmax}
    reports = train_objects(objects, ["training.eval_batch_size=64"]).reports
    assert 0.0 <= reports[-1]["accuracy"] <= 1.0
    # On the driver one batch; at each report two eval batches (64 + 37 rows) of logits, then ids for the metric.
    assert seen[-3:] == [((64, plain.CLASSES), True), ((37, plain.CLASSES), True), ("metrics", (101,), "int64")]
    with pytest.raises(SpecError, match="^preprocess_logits_for_metrics: only used with compute_metrics"):
        prepare(plain.search_spec(SMALL + ["search.metric=eval_loss", "search.mode=min"]),
                user_objects(**{**objects, "compute_metrics": None}))


def test_run_search_loads_a_spec_file_for_the_objects_too(tmp_path, no_ray):
    """Issue 28: ``run_search("x.yaml", model_init=…)`` loads the file (its settings reach the objects' checks),
    and a missing file is one SpecError."""
    path = _spec_file(tmp_path, "name: from-a-file")
    with pytest.raises(SpecError, match="^train_dataset: 20 items, fewer than the largest batch size 32"):
        run_search(path, **_bad(train_dataset=plain.Blobs(20, seed=1)))
    with pytest.raises(SpecError, match="no such file"):
        run_search(str(tmp_path / "missing.yaml"), **_bad())


def test_the_loss_type_warning_is_not_logged_in_every_trial():
    """Issue 28: transformers warns once per process (every trial) that GPT2LMHeadModel's loss_type is None, then
    uses ForCausalLM; the model the loop builds has it set, and the loss is the same."""
    import logging

    from transformers.loss.loss_utils import ForCausalLMLoss
    from transformers.utils import logging as hf_logging

    from cbs_ray.sources.model import build_model, model_config

    messages = []
    handler = logging.Handler()
    handler.emit = lambda record: messages.append(record.getMessage())
    logger = hf_logging.get_logger("transformers.modeling_utils")
    logger.addHandler(handler)
    logging.Logger.warning_once.cache_clear()  # transformers' once-per-process memory: this test sees its first
    try:
        data = user_objects(model_init=tiny_gpt2, train_dataset=Tokens(64), eval_dataset=Tokens(16))
        model = data.build_model(None)
        assert model.loss_type == "ForCausalLM" and model.loss_function is ForCausalLMLoss
        config = model_config({"name": None, "config": {"model_type": "gpt2", "n_embd": 16, "n_layer": 1,
                                                        "n_head": 2, "n_positions": 16}}, "causal-lm",
                              vocab_size=50, num_labels=2, pad_id=0, max_seq_length=16)
        assert build_model({"name": None}, "causal-lm", config).loss_type == "ForCausalLM"  # the spec path's
        tokens = torch.ones(1, 4, dtype=torch.long)
        model(input_ids=tokens, labels=tokens)
        assert not [m for m in messages if "loss_type=None" in m]
        tiny_gpt2()(input_ids=tokens, labels=tokens)  # as transformers builds it: the warning this test would see
        assert [m for m in messages if "loss_type=None" in m]
    finally:
        logger.removeHandler(handler)


def test_an_fsdp_plan_on_a_model_init_without_blocks_is_refused_before_ray():
    """The plain example's model has no repeated layers: under FSDP the driver's check says so in one line, and
    names the key that would fix it; with its class named it passes."""
    spec = plain.search_spec(SMALL + ["training.parallelism=fsdp", "resources.workers_per_trial=2"])
    objects = plain.objects(256, 64)
    model = objects["model_init"]()
    if any(isinstance(m, torch.nn.ModuleList) for m in model.modules()):
        pytest.skip("the plain example grew a ModuleList")
    with pytest.raises(SpecError, match=r"^training.parallelism: fsdp: .* training.fsdp_block_class$"):
        prepare(spec, user_objects(**objects))
    named = type(next(m for m in model.modules() if isinstance(m, torch.nn.Linear))).__name__
    prepare(plain.search_spec(SMALL + ["training.parallelism=fsdp", "resources.workers_per_trial=2",
                                       f"training.fsdp_block_class={named}"]), user_objects(**objects))


def test_a_ray_dataset_with_model_init_is_refused_in_one_line():
    """A ``ray.data.Dataset`` (its class's module is what is asked: a stand-in here, Ray not started) among a
    pipeline's map-style objects is refused in one line: it is taken as run_search's train_dataset without
    eval_dataset, streamed (tests/sources/test_ray_dataset.py)."""

    class Dataset:  # ray.data.Dataset's name and module, nothing else
        __module__ = "ray.data.dataset"

    objects = {**plain.objects(256, 64), "train_dataset": Dataset()}
    with pytest.raises(SpecError, match=r"^train_dataset: a ray.data.Dataset is taken as run_search's "
                                        r"train_dataset without eval_dataset .*not beside map-style datasets$"):
        prepare(plain.search_spec(SMALL), user_objects(**objects))
