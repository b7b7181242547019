"""Spec validation: every bad input is one line naming the field, exit code 2, before Ray starts."""

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from cbs_ray.search import main
from cbs_ray.spec.errors import SpecError
from cbs_ray.spec.load import load_spec, spec_from_dict
from cbs_ray.spec.resolve import resolve_budget
from cbs_ray.spec.schema import SearchSpec


def test_default_spec_is_valid_and_expands_batch_range():
    spec = load_spec()
    assert spec.batch_sizes == [16, 32, 64, 128, 256, 512]
    assert spec.training.budget_samples == 7168
    assert SearchSpec().name == spec.name


def test_overrides_are_parsed_as_yaml():
    spec = load_spec(None, ["search.batch_sizes=[16, 64]", "training.base_lr=3e-4", "resources.use_gpu=false"])
    assert spec.batch_sizes == [16, 64]
    assert spec.training.base_lr == 3e-4


def test_an_override_sets_one_key_of_a_mapping_left_at_its_default(tmp_path):
    # Without --space the model config and the batch range are the defaults: one key changes, the rest stay.
    spec = load_spec(None, ["model.config.num_hidden_layers=4", "search.batch_sizes.max=256"])
    assert spec.model.config["num_hidden_layers"] == 4 and spec.model.config["model_type"] == "bert"
    assert spec.batch_sizes == [16, 32, 64, 128, 256]
    # A section left empty in a YAML file (its keys commented out) takes an override like a missing one.
    space = tmp_path / "space.yaml"
    space.write_text("name: x\ndata:\n  # max_seq_length: 16\n")
    assert load_spec(space, ["data.max_seq_length=16"]).data.max_seq_length == 16


def test_budget_epochs_resolve_to_whole_report_intervals():
    spec = load_spec(None, ["training.budget_samples=null", "training.budget_epochs=1.5"])
    # 1.5 × 8192 = 12288, a multiple of 1024 (eval_every_samples)
    assert resolve_budget(spec, 8192) == 12288
    assert resolve_budget(spec, 8000) == 11264  # 12000 rounded down to a multiple of 1024


BAD = [
    (["bogus=1"], "bogus: unknown key"),
    (["tracking.mlflow.bogus=1"], "tracking.mlflow.bogus: unknown key"),
    (["tracking.wandb.mode=online2"], "tracking.wandb.mode: must be one of online, offline, disabled"),
    (["tracking.tensorboard=1"], "tracking.tensorboard: expected true/false"),
    (["search.study_name=cbs"], "search.study_name: names a study in search.study_storage, which is not set"),
    (["search.study_storage=cbs.journal", "search.strategy=grid", "search.early_stopping=false"],
     "search.study_storage: the grid strategy does not use Optuna"),
    (["data.builtin_negation=1.5"], "data.builtin_negation: must be in [0, 1], got 1.5"),
    (["data.markov_vocab_size=1"], "data.markov_vocab_size: must be from 2 to 8192, got 1"),
    (["ladder.cap=0.5"], "ladder.cap: must be from 1 to 1000, got 0.5"),
    (["ladder.min_warmup_steps=-1"], "ladder.min_warmup_steps: must be from 0 to 1000000, got -1"),
    (["ladder.predict=curve"], "ladder.predict: must be one of power_law, loss, got 'curve'"),
    (["data.markov_rank=0"], "data.markov_rank: must be from 1 to 1024, got 0"),
    (["data.markov_zipf_exponent=-1"], "data.markov_zipf_exponent: must be from 0 to 10, got -1"),
    (["data.markov_coupling=-0.5"], "data.markov_coupling: must be from 0 to 100, got -0.5"),
    (["training.adam_beta1=1.0"], "training.adam_beta1: must be in [0, 1), got 1.0"),
    (["search.metric=f1 score"], "search.metric: must be a metric's name (accuracy, eval_loss, perplexity, bleu, excess_loss, "
                                 "or a key compute_metrics returns), got 'f1 score'"),
    (["branch.tolerance=1.0"], "branch.tolerance: must be in [0, 1), got 1.0"),
    (["training.adam_beta2=-0.1"], "training.adam_beta2: must be in [0, 1), got -0.1"),
    (["search.turning_point=smooth"], "search.turning_point:"),
    (["training.budget_sample=1"], "training.budget_sample: unknown key"),
    (["training.budget_samples=abc"], "training.budget_samples: expected an integer"),
    (["training.base_lr=fast"], "training.base_lr: expected a number"),
    (["search.batch_sizes=[8, 24]"], "search.batch_sizes: batch size must be a power of two, got 24"),
    (["search.batch_sizes=[0, 8]"], "search.batch_sizes: batch size must be positive"),
    (["search.batch_sizes=[-8]"], "search.batch_sizes: batch size must be positive"),
    (["search.batch_sizes={min: 8, max: 100}"], "search.batch_sizes.max: batch size must be a power of two"),
    (["search.alpha_range=[0.5, 1.5]"], "search.alpha_range: must satisfy"),
    (["search.alpha_range=[-0.1, 1.0]"], "search.alpha_range: must satisfy"),
    (["search.warmup_fraction_range=[0.0, 2.0]"], "search.warmup_fraction_range: must satisfy"),
    (["training.budget_samples=64"], "training.budget_samples: 64 is smaller than the largest batch size 512"),
    (["training.budget_samples=3000"], "training.budget_samples: must be a multiple"),
    (["training.eval_every_samples=1000"], "training.eval_every_samples: must be a positive multiple of the largest"),
    (["search.num_trials=3"], "search.num_trials: must be at least the number of batch sizes"),
    (["search.metric=accuracy", "task=causal-lm", "model.config={model_type: gpt2}"], "search.metric: accuracy needs"),
    (["search.metric=eval_loss"], "search.mode: eval_loss is better when it is lower"),
    (["resources.use_gpu=yes please"], "resources.use_gpu: expected true/false"),
    (["resources.workers_per_trial=3"], "search.batch_sizes: 16 does not split over"),
    (["task=translation"], "task: must be one of"),
    (["model.name=bert-base-uncased"], "model: set exactly one of"),
    (["data.source=files", "data.train_file=/no/such/train.csv", "data.eval_file=/no/such/dev.csv"],
     "data.train_file: no such file"),
    (["data.source=hub"], "data.hub_name: required"),
    (["asha.grace_period_samples=3000"], "asha.grace_period_samples: must be a positive multiple"),
    (["asha.reduction_factor=1"], "asha.reduction_factor: must be at least 2"),
    (["training.persistent_workers=true"], "training.persistent_workers: needs DataLoader workers"),
    (["search.batch_sizes=auto", "asha.grace_period_samples=32768"],
     "asha.grace_period_samples: 32768 exceeds the budget 7168"),  # caught before the probe runs
    (["training.grad_clip_norm=.nan"], "training.grad_clip_norm: expected a finite number, got nan"),
    (["training.weight_decay=.inf"], "training.weight_decay: expected a finite number, got inf"),
    (["training.budget_samples=null", "training.budget_epochs=.nan"], "training.budget_epochs: expected a finite"),
    (["training.persistent_workers=true", "training.dataloader_workers=0", "resources.use_gpu=true"],
     "training.persistent_workers: needs DataLoader workers"),
    (["training"], "--set training: expected key=value"),
    (["search.strategy=bayes"], "search.strategy: must be one of"),
    (["search.method=bayes"], "search.method: must be one of scratch, branch, ladder"),
    (["search.strategy=grid"], "search.early_stopping: the grid strategy trains every point"),
    (["search.grid_points=0"], "search.grid_points: must be from 1 to 100"),
    (["training.memory_limit_gb=0"], "training.memory_limit_gb: must be positive or null"),
    (["training.eval_batch_size=0"], "training.eval_batch_size: must be at least 1"),
    (["training.eval_subset_examples=0"], "training.eval_subset_examples: must be positive or null, got 0"),
    # batch_sizes: auto trains its probe at training.base_batch: errors name that field.
    (["search.batch_sizes=auto", "training.base_batch=24"],
     "training.base_batch (the probe's batch with search.batch_sizes: auto): batch size must be a power of two"),
    (["search.batch_sizes=auto", "resources.workers_per_trial=3"],
     "training.base_batch (the probe's batch with search.batch_sizes: auto): 16 does not split over"),
    (["search.batch_sizes=auto", "training.base_batch=4096"],
     "training.eval_every_samples: must be a positive multiple of training.base_batch"),
    # One row per check declared beside its field (test_every_declared_check_has_a_bad_row).
    (["name=a b"], "name: must be one folder name (no spaces, slashes, control characters, . or ..; at most 100 bytes in UTF-8), got 'a b'"),
    (["branch.window_min_steps=0"], "branch.window_min_steps: must be at least 1, got 0"),
    (["branch.seesaw_first_doubling=1.0"], "branch.seesaw_first_doubling: must be in [0, 1), got 1.0"),
    (["ladder.fraction=1"], "ladder.fraction: must be in (0, 1), got 1"),
    (["ladder.seeds=0"], "ladder.seeds: must be from 1 to 100 (each one multiplies the trials), got 0"),
    (["ladder.alpha=1.5"], "ladder.alpha: must be in [0, 1], got 1.5"),
    (["ladder.min_steps=0"], "ladder.min_steps: must be from 1 to 1000000, got 0"),
    (["ladder.first_rung=0"], "ladder.first_rung: must be in (0, 1), got 0"),
    (["branch.repeats=0"], "branch.repeats: must be from 1 to 100 (each one multiplies the trials), got 0"),
    (["branch.validation_seeds=0"], "branch.validation_seeds: must be from 1 to 100 (each one multiplies the trials), got 0"),
    (["name=runs/a"], "name: must be one folder name (no spaces, slashes, control characters, . or ..; at most 100 bytes in UTF-8), got 'runs/a'"),
    (["model.config={hidden_size: 64}"], "model.config: must contain model_type (e.g. bert, gpt2)"),
    (["model.vocab_size=9"], "model.vocab_size: must be at least 10, got 9"),
    (["data.builtin_train_examples=0"], "data.builtin_train_examples: must be from 1 to 10000000"),
    (["data.builtin_eval_examples=-1"], "data.builtin_eval_examples: must be from 1 to 10000000"),
    (["data.max_seq_length=3"], "data.max_seq_length: must be from 4 to 131072, got 3"),
    (["data.eval_examples=0"], "data.eval_examples: must be positive"),
    (["data.source=parquet", "task=causal-lm", "search.metric=eval_loss", "search.mode=min"],
     "data.path: required when data.source is parquet"),
    (["data.max_train_examples=0"], "data.max_train_examples: must be positive"),
    (["data.max_eval_examples=0"], "data.max_eval_examples: must be positive"),
    (["data.holdout_examples=0"], "data.holdout_examples: must be positive"),
    (["training.budget_samples=null", "training.budget_epochs=0"], "training.budget_epochs: must be positive, got 0.0"),
    (["training.base_lr=0"], "training.base_lr: must be a positive number, got 0.0"),
    (["training.base_batch=0"], "training.base_batch: must be from 1 to 16777216, got 0"),
    (["training.label_smoothing=1"], "training.label_smoothing: must be in [0, 1), got 1.0"),
    (["training.layer_lr_decay=0"], "training.layer_lr_decay: must be in (0, 1], got 0.0"),
    (["training.dataloader_workers=-1"], "training.dataloader_workers: must be >= 0, got -1"),
    (["training.weight_decay=-0.1"], "training.weight_decay: must be >= 0, got -0.1"),
    (["training.grad_clip_norm=0"], "training.grad_clip_norm: must be positive or null, got 0.0"),
    (["training.divergence_factor=1"], "training.divergence_factor: must be greater than 1, got 1.0"),
    (["training.micro_batch_size=0"], "training.micro_batch_size: must be positive, got 0"),
    (["search.alpha_range=[0.5]"], "search.alpha_range: expected [low, high], got [0.5]"),
    (["search.warmup_fraction_range=[0.2, 0.1]"], "search.warmup_fraction_range: must satisfy 0.0 <= low <= high"),
    (["search.warmup_fraction_range=[low, high]"], "search.warmup_fraction_range: expected [low, high], got"),
    (["search.tolerance=-0.01"], "search.tolerance: must be in [0, 1), got -0.01"),
    (["search.repeats=0"], "search.repeats: must be from 1 to 100 (each one multiplies the trials), got 0"),
    (["resources.workers_per_trial=0"], "resources.workers_per_trial: must be at least 1, got 0"),
    (["resources.cpus_per_worker=0"], "resources.cpus_per_worker: must be at least 1, got 0"),
    (["resources.max_failures=-1"], "resources.max_failures: must be >= 0, got -1"),
    (["resources.max_concurrent_trials=0"], "resources.max_concurrent_trials: must be at least 1"),
    (["data.max_target_length=1"], "data.max_target_length: must be from 2 to 131072, got 1"),
    (["generation.max_new_tokens=0"], "generation.max_new_tokens: must be from 1 to 131072, got 0"),
    (["generation.num_beams=0"], "generation.num_beams: must be at least 1, got 0"),
    # Was a ZeroDivisionError: each field's own checks come before the rules that relate fields.
    (["search.batch_sizes=auto", "resources.workers_per_trial=0"],
     "resources.workers_per_trial: must be at least 1, got 0"),
    # A value that should not be set at all is told so before its own range is checked.
    (["training.budget_epochs=0"], "training: set exactly one of budget_samples, budget_epochs and budget_tokens"),
    (["training.budget_samples=null", "training.budget_tokens=0"], "training.budget_tokens: must be from 1 to 1125899906842624, got 0"),
    # Issue 47: every numeric key bounded before Ray (tests/spec/test_spec_bounds.py has the hostile values).
    (["data.markov_seed=-1"], "data.markov_seed: must be from 0 to 4294967295, got -1"),
    (["training.budget_samples=0"], "training.budget_samples: must be from 1 to 1099511627776, got 0"),
    (["training.budget_samples=null", "training.budget_epochs=1e9"],
     "training.budget_epochs: must be from 0 to 1000000, got 1000000000.0"),
    (["training.eval_every_samples=0"], "training.eval_every_samples: must be from 1 to 1099511627776, got 0"),
    (["search.num_trials=0"], "search.num_trials: must be from 1 to 10000, got 0"),
    (["search.seed=-1"], "search.seed: must be from 0 to 4294967295, got -1"),
    (["asha.grace_period_samples=0"], "asha.grace_period_samples: must be from 1 to 1099511627776, got 0"),
]


@pytest.mark.parametrize("overrides,message", BAD, ids=[b[1].split(":")[0] + str(i) for i, b in enumerate(BAD)])
def test_bad_spec_names_the_field(overrides, message):
    with pytest.raises(SpecError) as info:
        load_spec(None, overrides)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("overrides,message", BAD, ids=[b[1].split(":")[0] + str(i) for i, b in enumerate(BAD)])
def test_cli_bad_input_is_one_line_and_exit_2(overrides, message, capsys):
    argv = ["--dry-run"] + [a for o in overrides for a in ("--set", o)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and message in err and "\n" not in err


def test_every_declared_check_has_a_bad_row():
    """Each check declared beside a field (``metadata=check(...)``) is exercised by a row of BAD."""
    def declared(section, where):
        for f in dataclasses.fields(section):
            value, path = getattr(section, f.name), f"{where}{f.name}"
            if f.name == "method_sections":  # the methods' own sections, each a key of the spec's
                for key, method_section in value.items():
                    yield from declared(method_section, key + ".")
            if dataclasses.is_dataclass(value):
                yield from declared(value, path + ".")
            for check in f.metadata.get("checks", ()):
                yield f"{path}: {check.says.split('{')[0]}"

    raised = []
    for overrides, _ in BAD:
        with pytest.raises(SpecError) as info:
            load_spec(None, overrides)
        raised.append(str(info.value))
    heads = list(declared(SearchSpec(), ""))
    assert len(heads) >= 30
    assert [head for head in heads if not any(message.startswith(head) for message in raised)] == []


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.mark.parametrize("argv,message", [
    (["--resume", "/no/such/experiment"], "--resume: /no/such/experiment: not a cbs-ray experiment directory"),
    (["--resume", "/tmp", "--set", "search.num_trials=3"], "--resume: continues the experiment's own spec; drop --set"),
    (["--resume", "/tmp", "--dry-run"], "drop --dry-run"),
    (["--space", "/no/such/space.yaml"], "--space: no such file"),
])
def test_cli_bad_resume_and_space_are_one_line_and_exit_2(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and message in err and "\n" not in err


def test_resume_of_a_directory_without_tune_state(tmp_path, capsys):
    from cbs_ray.records.storage import write_meta

    write_meta(str(tmp_path), {"name": "x", "metric": "accuracy", "mode": "max", "spec": {}, "budget_samples": 1})
    assert main(["--resume", str(tmp_path)]) == 2
    assert "Tune has no experiment state to restore there" in capsys.readouterr().err


def test_batch_larger_than_the_dataset(capsys):
    argv = ["--dry-run", "--set", "data.builtin_train_examples=100"]
    assert main(argv) == 2
    assert "search.batch_sizes: largest batch 512 exceeds the 100 training examples" in capsys.readouterr().err


def test_missing_column_in_local_file(tmp_path, capsys):
    train = write(tmp_path / "train.csv", "text,label\n" + "good film,1\nbad film,0\n" * 300)
    dev = write(tmp_path / "dev.csv", "text,label\ngood,1\nbad,0\n")
    argv = ["--dry-run", "--set", "data.source=files", "--set", f"data.train_file={train}",
            "--set", f"data.eval_file={dev}"]
    assert main(argv) == 2  # text_column defaults to "sentence"
    assert "data.text_column: column 'sentence' not in" in capsys.readouterr().err
    assert main(argv + ["--set", "data.text_column=text"]) == 0


def test_eval_text_column_reads_a_differently_named_dev_column(tmp_path, capsys):
    train = write(tmp_path / "train.tsv", "label\tsentence\n" + "1\tgood film\n0\tbad film\n" * 300)
    dev = write(tmp_path / "dev.tsv", "label\tcontent\n1\tgood\n0\tbad\n")
    argv = ["--dry-run", "--set", "data.source=files", "--set", f"data.train_file={train}",
            "--set", f"data.eval_file={dev}"]
    assert main(argv) == 2
    assert "data.text_column: column 'sentence' not in" in capsys.readouterr().err
    assert main(argv + ["--set", "data.eval_text_column=content"]) == 0


def test_local_tsv_file_and_relative_paths_in_a_spec(tmp_path, capsys):
    (tmp_path / "data").mkdir()
    write(tmp_path / "data" / "train.tsv", "sentence\tlabel\n" + 'a "quoted film\t1\nbad film\t0\n' * 300)
    write(tmp_path / "data" / "dev.tsv", "sentence\tlabel\ngood\t1\nbad\t0\n")
    spec = write(tmp_path / "space.yaml",
                 "data: {source: files, train_file: data/train.tsv, eval_file: data/dev.tsv}\n")
    assert main(["--space", str(spec), "--dry-run"]) == 0
    assert "B=128" in capsys.readouterr().out


def test_unknown_model_name(capsys):
    argv = ["--dry-run", "--set", "model.config=null", "--set", "model.name=no-such-org/no-such-model-xyz"]
    assert main(argv) == 2
    assert capsys.readouterr().err.startswith("error: model.name: cannot load 'no-such-org/no-such-model-xyz'")


def test_missing_space_file_and_invalid_yaml(tmp_path, capsys):
    assert main(["--space", str(tmp_path / "nope.yaml")]) == 2
    assert "--space: no such file" in capsys.readouterr().err
    bad = write(tmp_path / "bad.yaml", "search: [unclosed\n")
    assert main(["--space", str(bad)]) == 2
    assert "is not valid YAML" in capsys.readouterr().err


@pytest.mark.parametrize("text", ["", "\n  \n", "# every key commented out\n# search:\n#   seed: 1\n", "---\n"])
def test_an_empty_space_file_is_an_error_not_the_defaults(text, tmp_path, capsys):
    empty = write(tmp_path / "empty.yaml", text)
    assert main(["--space", str(empty), "--dry-run"]) == 2
    assert capsys.readouterr().err == f"error: {empty} is empty\n"


def test_a_null_document_still_runs_the_defaults(tmp_path):
    # Not empty: the user wrote a value, YAML's "nothing here".
    assert load_spec(write(tmp_path / "null.yaml", "null\n")).name == SearchSpec().name


@pytest.mark.parametrize("text", ["[]\n", "0\n", "false\n", "''\n", "- search\n"])
def test_a_top_level_that_is_not_a_mapping_is_one_line_and_exit_2(text, tmp_path, capsys):
    space = write(tmp_path / "space.yaml", text)
    assert main(["--space", str(space), "--dry-run"]) == 2
    assert capsys.readouterr().err == f"error: --space: {space} must hold a mapping at the top level\n"


@pytest.mark.parametrize("content", [b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "name: caf\u00e9\n".encode("latin-1"),
                                     b"name: x\n\x00\x00"])
def test_a_binary_or_non_utf8_space_file_is_one_line_and_exit_2(content, tmp_path, capsys):
    binary = tmp_path / "space.yaml"
    binary.write_bytes(content)
    assert main(["--space", str(binary), "--dry-run"]) == 2
    assert capsys.readouterr().err == f"error: {binary}: not a UTF-8 text file\n"


def test_unsafe_yaml_tags_are_refused(tmp_path, capsys):
    bad = write(tmp_path / "evil.yaml", "name: !!python/object/apply:os.system ['echo hacked']\n")
    assert main(["--space", str(bad), "--dry-run"]) == 2
    assert "not valid YAML" in capsys.readouterr().err


def test_unknown_cli_flag_is_one_line_exit_2(capsys):
    # A real process: what a user sees, with no traceback.
    proc = subprocess.run([sys.executable, "-m", "cbs_ray.search", "--bogus"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "unrecognized arguments: --bogus" in proc.stderr
    from cbs_ray.cli import search_main  # the second case in this process (a subprocess cost 5 s: issue 25)

    assert search_main(["--dry-run", "--set", "search.batch_sizes=[3]"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.strip() == "error: search.batch_sizes: batch size must be a power of two, got 3"


def test_spec_from_dict_rejects_non_mapping_sections():
    with pytest.raises(SpecError, match="^training: expected a mapping"):
        spec_from_dict({"training": [1, 2]})


def test_the_probe_is_one_trial_whatever_the_strategy_and_repeats():
    from cbs_ray.tune.probe import probe_spec
    from cbs_ray.tune.search_space import num_trials

    spec = load_spec(None, ["search.batch_sizes=auto", "search.strategy=grid", "search.early_stopping=false",
                            "search.repeats=2"])
    assert num_trials(spec) > 1 and num_trials(probe_spec(spec)) == 1  # a grid probe trained 9 points
    assert probe_spec(spec).search.repeats == 1


def test_auto_batch_sizes_dry_run_shows_the_probe(capsys):
    assert main(["--dry-run", "--set", "search.batch_sizes=auto"]) == 0
    out = capsys.readouterr().out
    assert "batch sizes: auto" in out and "B=16 = 4 micro × 4 accum × 1 workers" in out


def test_apply_batch_grid_fits_the_cadence_to_the_grid():
    from cbs_ray.spec.resolve import apply_batch_grid

    spec = load_spec(None, ["search.batch_sizes=auto", "training.budget_samples=16384", "training.eval_every_samples=2048",
                            "asha.grace_period_samples=4096", "search.num_trials=12"])
    changes = apply_batch_grid(spec, [64, 128, 256, 512, 1024, 2048, 4096])
    assert spec.batch_sizes[-1] == 4096 and spec.training.eval_every_samples == 4096
    assert spec.training.budget_samples == 16384 and spec.asha.grace_period_samples == 4096
    assert spec.search.num_trials == 12
    assert any(c.startswith("training.eval_every_samples 2048 -> 4096") for c in changes)


def _files_argv(train, dev, *extra):
    return ["--dry-run", "--set", "data.source=files", "--set", f"data.train_file={train}", "--set",
            f"data.eval_file={dev}", "--set", "data.text_column=text", *extra]


def test_label_names_become_class_ids_in_the_training_labels_order(tmp_path, capsys):
    from cbs_ray.data.prepare import prepare_data

    train = write(tmp_path / "train.csv", "text,label\n" + "good film,pos\nbad film,neg\n" * 300)
    dev = write(tmp_path / "dev.csv", "text,label\ngood,pos\nbad,neg\n")
    assert main(_files_argv(train, dev)) == 0
    spec = load_spec(None, ["data.source=files", f"data.train_file={train}", f"data.eval_file={dev}",
                            "data.text_column=text"])
    data = prepare_data(spec)
    assert data.train_labels[:2].tolist() == [1, 0] and data.eval_labels.tolist() == [1, 0]  # neg 0, pos 1
    assert data.num_labels == 2
    unseen = write(tmp_path / "unseen.csv", "text,label\ngood,pos\nso so,neutral\n")
    assert main(_files_argv(train, unseen)) == 2
    assert "data.label_column: label 'neutral' in" in capsys.readouterr().err


def test_bad_labels_and_empty_texts_in_local_files(tmp_path, capsys):
    from cbs_ray.data.files import load_texts

    train = write(tmp_path / "train.csv", "text,label\n" + "good film,1\nbad film,0\n,1\n" * 100)
    negative = write(tmp_path / "negative.csv", "text,label\ngood,1\nbad,-1\n")
    assert main(_files_argv(train, negative)) == 2  # caught before any trial, naming the eval file
    assert f"data.label_column: labels must be non-negative integers ({negative} has -1)" in capsys.readouterr().err
    empty_label = write(tmp_path / "empty.csv", "text,label\ngood,1\nbad,\n")
    assert main(_files_argv(train, empty_label)) == 2
    assert f"data.label_column: empty label in {empty_label} (row 2)" in capsys.readouterr().err
    one_class = write(tmp_path / "one.csv", "text,label\n" + "good film,1\n" * 200)
    assert main(_files_argv(one_class, one_class)) == 2  # one class would make the head a regression
    assert "data.label_column: the training labels hold one class (1)" in capsys.readouterr().err
    spec = load_spec(None, ["data.source=files", f"data.train_file={train}", f"data.eval_file={train}",
                            "data.text_column=text"])
    (texts, _), _, _ = load_texts(spec)
    assert texts[2] == "" and "None" not in texts  # an empty field is an empty text, not the word None


def test_an_unreadable_eval_file_is_named_and_home_paths_load(tmp_path, capsys, monkeypatch):
    train = write(tmp_path / "train.csv", "text,label\n" + "good film,1\nbad film,0\n" * 300)
    broken = write(tmp_path / "broken.json", "{not json")
    assert main(_files_argv(train, broken)) == 2
    assert "data.eval_file: cannot read" in capsys.readouterr().err
    monkeypatch.setenv("HOME", str(tmp_path))
    assert main(_files_argv("~/train.csv", "~/train.csv")) == 0


@pytest.mark.parametrize("error", ["ReportError", "DoesNotFit"])
def test_a_search_that_ran_but_has_nothing_to_report_is_one_line_and_exit_1(error, capsys, monkeypatch):
    import cbs_ray.tune.api as api
    from cbs_ray.records.storage import ReportError
    from cbs_ray.tune.runner import DoesNotFit

    raised = {"ReportError": ReportError, "DoesNotFit": DoesNotFit}[error]

    def fails(*args, **kwargs):
        raise raised("/x/exp: no trial has reported a result yet; 2 of 2 trials failed, the first with: E")

    monkeypatch.setattr(api, "run_search", fails)
    assert main([]) == 1
    assert capsys.readouterr().err == \
        "error: /x/exp: no trial has reported a result yet; 2 of 2 trials failed, the first with: E\n"


@pytest.mark.parametrize("override, line", [
    # transformers accepts the config; the model cannot be built: caught on the meta device before Ray.
    ("model.config.num_attention_heads=3", "error: model.config: cannot build the model: The hidden size (64) "
                                           "is not a multiple of the number of attention heads (3)\n"),
    # Not the kilobytes of model types transformers lists after the reason.
    ("model.config={model_type: nonsense}", "error: model.config: cannot build a 'nonsense' config: "
                                            "Unrecognized model identifier: nonsense\n"),
])
def test_a_model_that_cannot_be_built_is_a_one_line_error_before_ray(override, line, capsys):
    assert main(["--dry-run", "--set", override]) == 2
    assert capsys.readouterr().err == line


def test_the_plan_counts_the_repeat_trials():
    from cbs_ray.tune.search_space import outline_lines

    first = outline_lines(load_spec(None, ["search.repeats=3"]), 16384)[0]
    assert first.startswith("tiny-bert-sentiment: 6 batch sizes, 18 trials + up to 12 repeat trials (each batch "
                            "size's best, 2 more seeds) (tpe")
    assert "repeat" not in outline_lines(load_spec(None, []), 16384)[0]


def test_a_sections_rules_follow_the_entry_that_reads_it_not_a_method_name():
    """``spec.checks.reads_section``: a section's switches need the method whose registry entry reads that section
    (``MethodEntry.section``), for the built-in ones as for a registered one (``tests/spec/test_method_sections.py``)."""
    from cbs_ray.spec.checks import reads_section

    for method, branch, ladder in [("scratch", False, False), ("branch", True, False), ("ladder", False, True)]:
        spec = SearchSpec()
        spec.search.method = method
        read = (reads_section(spec, spec.section("branch")), reads_section(spec, spec.section("ladder")))
        assert read == (branch, ladder), method
    with pytest.raises(SpecError, match="ladder.validate: validates the ladder's prediction; set search.method"):
        load_spec(None, ["ladder.validate=true"])
    with pytest.raises(SpecError, match="search.strategy: grid with search.grid_points=3"):  # the ladder's own rule
        load_spec(None, ["search.method=ladder", "search.strategy=grid", "search.grid_points=3",
                   "search.early_stopping=false", "search.batch_sizes=[8, 16, 32, 64]"])
    with pytest.raises(SpecError, match="branch.validate_schedule: validates the schedule"):
        load_spec(None, ["search.method=ladder", "branch.validate_schedule=true", "search.batch_sizes=[8, 16, 32, 64]"])
