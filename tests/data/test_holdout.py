"""data.holdout_examples: select on a sample held out of the training set, keep the eval file as a dev set."""

import pandas as pd
import pytest

from cbs_ray.analysis.tables import trial_table
from cbs_ray.data.files import hold_out, load_texts
from cbs_ray.methods.scratch.batch_table import per_batch_table
from cbs_ray.search import main
from cbs_ray.spec.errors import SpecError
from cbs_ray.spec.load import load_spec
from helpers.training import train_small as run


def test_hold_out_draws_a_fixed_disjoint_sample_with_its_labels():
    train = ([f"t{i}" for i in range(10)], list(range(10)))  # label i belongs to text ti
    rest, held = hold_out(train, 3, seed=0)
    assert len(rest[0]) == 7 and len(held[0]) == 3
    assert sorted(rest[0] + held[0], key=lambda t: int(t[1:])) == train[0]  # a partition, nothing lost
    assert all(text == f"t{label}" for part in (rest, held) for text, label in zip(*part))
    assert hold_out(train, 3, seed=0) == (rest, held)  # the same sample whatever else runs
    assert {hold_out(train, 3, seed=s)[1][0][0] for s in range(20)} != {held[0][0]}  # but a random one


def test_hold_out_refuses_to_leave_nothing_to_train_on():
    with pytest.raises(SpecError, match="holdout_examples: 10 would leave nothing to train on .*has 10"):
        hold_out(([f"t{i}" for i in range(10)], [0] * 10), 10)


def test_files_select_on_held_out_training_examples_and_keep_the_eval_file_as_dev(tmp_path):
    train = tmp_path / "train.tsv"
    train.write_text("sentence\tlabel\n" + "".join(f"train {i}\t{i % 2}\n" for i in range(400)))
    dev = tmp_path / "dev.tsv"
    dev.write_text("sentence\tlabel\ndev good\t1\ndev bad\t0\n")
    spec = load_spec(None, ["data.source=files", f"data.train_file={train}", f"data.eval_file={dev}",
                            "data.holdout_examples=50"])
    (train_texts, _), (eval_texts, eval_labels), dev_set = load_texts(spec)
    assert len(train_texts) == 350 and len(eval_texts) == 50
    assert not set(train_texts) & set(eval_texts)
    assert all(t.startswith("train ") and label == int(t.split()[1]) % 2 for t, label in zip(eval_texts, eval_labels))
    assert dev_set == (["dev good", "dev bad"], [1, 0])


def test_without_holdout_there_is_no_dev_set():
    assert load_texts(load_spec(None, ["data.builtin_train_examples=64", "data.builtin_eval_examples=32"]))[2] is None


def test_a_trial_reports_the_dev_set_once_at_the_full_budget():
    reports, _ = run(["data.holdout_examples=64"], batch=32)  # builtin: 512 train, 128 eval examples
    assert [r["samples_seen"] for r in reports] == [128, 256]
    assert [r["eval_examples"] for r in reports] == [64, 64]  # selects on the 64 held out
    assert "dev_accuracy" not in reports[0]
    assert reports[-1]["dev_eval_examples"] == 128 and 0.0 <= reports[-1]["dev_accuracy"] <= 1.0
    assert reports[-1]["dev_eval_loss"] > 0


def test_per_batch_shows_the_selected_trials_dev_figure_not_the_dev_sets_best():
    history = pd.DataFrame([
        {"trial_id": tid, "batch_size": 16, "alpha": 0.5, "warmup_fraction": 0.1, "peak_lr": 1e-3,
         "samples_seen": 4096, "accuracy": acc, "dev_accuracy": dev, "wall_time_s": 10.0, "samples_per_s": 400.0,
         "diverged": False}
        for tid, acc, dev in [("a", 0.80, 0.75), ("b", 0.70, 0.78)]])
    trials = trial_table(history, metric="accuracy", budget_samples=4096)
    assert trials.set_index("trial_id")["dev_accuracy"].to_dict() == {"a": 0.75, "b": 0.78}
    row = per_batch_table(trials, metric="accuracy", mode="max").iloc[0]
    assert (row["best_accuracy"], row["dev_accuracy"]) == (0.80, 0.75)  # trial a is selected; b's 0.78 is not


@pytest.mark.parametrize("value, message", [
    ("0", "data.holdout_examples: must be positive"),
    ("600", "data.holdout_examples: 600 would leave nothing to train on (the training set has 512 examples)"),
])
def test_bad_holdout_is_one_line_and_exit_2(value, message, capsys):
    argv = ["--dry-run", "--set", "data.builtin_train_examples=512", "--set", f"data.holdout_examples={value}"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(message) and "\n" not in err
