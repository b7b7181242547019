"""Branch mode (search.method: branch) from the outside: its bad input is one line and exit code 2 before Ray
starts; what it costs and which alpha the schedule run follows, on hand-built inputs; and end to end on a
real local Ray (marked e2e): the trunk and branches as Tune trials, summary.json's keys, the schedule run."""


import pytest

from cbs_ray.methods.branch.runs import validation_configs
from cbs_ray.methods.branch.search import branch_search_samples, scratch_search_samples
from cbs_ray.search import main
from cbs_ray.spec.branch_section import resolve_branching
from cbs_ray.spec.errors import SpecError
from cbs_ray.spec.load import load_spec

LM = "search_spaces/tiny_causal_lm.yaml"
BRANCH = ["search.method=branch"]


def _sets(overrides):
    return [a for o in overrides for a in ("--set", o)]


# The four bad inputs (and the rules around them), each one line naming its key, exit code 2.
BAD = [
    (["branch.window=0.75", "branch.checkpoints=[0.5]"],
     "branch.window: 6144 samples from the checkpoint at 4096 run past the budget (8192); only 4096 remain"),
    (["branch.trunk_batch_size=32", "branch.batch_sizes=[16, 64]"],
     "branch.batch_sizes: a branch's batch must be larger than the trunk's (branch.trunk_batch_size 32), got 16"),
    (["branch.trunk_batch_size=64", "branch.batch_sizes=null"],
     "branch.batch_sizes: no batch size larger than the trunk's (64) to branch at"),
    (["branch.checkpoints=[0.25, 1.5]"], "branch.checkpoints: a fraction of the budget must be in (0, 1), got 1.5"),
    (["branch.checkpoints=[0.0]"], "branch.checkpoints: a fraction of the budget must be in (0, 1), got 0.0"),
    (["branch.window=1.0"], "branch.window: a fraction of the budget must be in (0, 1), got 1.0"),
    (["branch.checkpoints=[0]"], "branch.checkpoints: must be a positive number of samples, got 0"),
    (["branch.trunk_batch_size=12"], "branch.trunk_batch_size: batch size must be a power of two, got 12"),
    (["branch.batch_sizes=[16, 4096]"],
     "training.eval_every_samples: must be a multiple of the largest branch batch 4096, got 2048"),
    (["search.batch_sizes=[16, 32]", "branch.trunk_batch_size=8", "resources.workers_per_trial=16"],
     "branch.trunk_batch_size: 8 does not split over resources.workers_per_trial=16 workers"),
    (["branch.alphas=[]"], "branch.alphas: expected a non-empty list of numbers"),
    (["branch.checkpoints=sometimes"], "branch.checkpoints: expected a non-empty list of fractions in (0, 1) or whole "
                                        "samples, or 'geometric', got 'sometimes'"),
    (["branch.schedule_rule=fastest"], "branch.schedule_rule"),
    (["search.batch_sizes=auto"], "search.batch_sizes: auto is not available with search.method branch"),
    (["search.strategy=tpe", "search.study_storage=sqlite:///x.db"],
     "search.study_storage: search.method branch trains a fixed grid"),
    (["storage_path=s3://bucket/runs"], "storage_path: search.method branch writes the trunk's checkpoints"),
]


@pytest.mark.parametrize("overrides,message", BAD, ids=[b[1].split(":")[0] + str(i) for i, b in enumerate(BAD)])
def test_bad_branch_spec_is_one_line_and_exit_2_before_ray(overrides, message, capsys):
    import ray

    assert main(["--space", LM, "--dry-run", *_sets(BRANCH + overrides)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and message in err and "\n" not in err
    # The same without --dry-run: the error comes before Ray starts.
    assert main(["--space", LM, *_sets(BRANCH + overrides)]) == 2
    assert message in capsys.readouterr().err
    assert not ray.is_initialized()


def test_token_budget_for_a_classification_task_is_one_line_and_exit_2(capsys):
    # The fourth bad input; the rule is the token budget's (training.budget_tokens, causal-lm only).
    assert main(["--dry-run", *_sets(BRANCH + ["training.budget_samples=null", "training.budget_tokens=65536"])]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: training.budget_tokens: ") and "unknown key" not in err and "\n" not in err


def test_window_past_the_budget_once_the_budget_resolves_from_epochs(capsys):
    # The budget in epochs is known only once the data are: 0.5 epochs of 16384 sentences = 8192 samples,
    # whose last checkpoint (6144) leaves 2048 samples, less than the 4096-sample window.
    overrides = BRANCH + ["training.budget_samples=null", "training.budget_epochs=0.5",
                          "data.builtin_train_examples=16384", "branch.checkpoints=[6144]", "branch.window=4096"]
    load_spec(LM, overrides)  # valid as far as the spec alone can tell
    assert main(["--space", LM, *_sets(overrides)]) == 2
    assert "branch.window: 4096 samples from the checkpoint at 6144 run past the budget (8192); only 2048 remain" \
        in capsys.readouterr().err


def test_validate_schedule_needs_branch_mode(capsys):
    assert main(["--space", LM, "--dry-run", "--validate-schedule"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("error: branch.validate_schedule: validates the schedule a branch search recommends; set "
                   "search.method=branch (--validate-schedule)")
    assert main(["--resume", "/tmp", "--validate-schedule"]) == 2
    assert "drop --validate-schedule" in capsys.readouterr().err


def test_a_branch_section_is_ignored_by_the_scratch_method():
    spec = load_spec(LM, ["branch.checkpoints=[0.5]", "branch.batch_sizes=[4096]"])
    assert spec.search.method == "scratch"


def test_dry_run_prints_the_branch_plan_and_its_cost(capsys):
    assert main(["--space", LM, "--dry-run", "--validate-schedule", *_sets(BRANCH)]) == 0
    out = capsys.readouterr().out
    # tiny_causal_lm.yaml: budget 8192, trunk B=8 (the smallest batch), branches at 16, 32, 64, alpha 0.5 alone;
    # default checkpoints 1/8, 1/4, 1/2 of the budget; the default window max(5 % of 8192 = 384, 8 steps x 64)
    # = 512 samples: 3 x 3 = 9 branches.
    assert "trunk: B=8" in out and "within ε = 0.01 nats (absolute)" in out
    assert "checkpoints at 1024, 2048, 4096 samples; window 512 samples (6.2% of the budget); optimizer steps per " \
           "window: B=16: 32, B=32: 16, B=64: 8" in out
    assert "branches: B in [16, 32, 64] x alpha in [0.5] from each checkpoint = 9 trials" in out
    # 8192 (trunk) + 9 x 512 = 12800; from scratch: 8192 x (1 + 3) = 32768.
    assert "samples trained: 12800 (trunk 8192 + branches 4608)" in out and "32768 (0.39 of it)" in out
    # the validation: 5 seeds x (the schedule + small, large, one iso-steps and the above control) x 8192
    assert "on 5 seeds held out from the trunk's, about 204800 samples more" in out
    assert "criterion, fixed before the validation runs" in out
    assert "warning" not in out
    # A window under the floor of steps at the largest batch is warned of; extra alphas are a named deviation.
    assert main(["--space", LM, "--dry-run", *_sets(BRANCH), "--set", "branch.window=128",
                 "--set", "branch.alphas=[0.5, 1.0]"]) == 0
    out = capsys.readouterr().out
    assert "warning: the largest branch batch 64 takes 2 optimizer steps per window, under the floor of 8" in out
    assert "deviation from the paper: branch LR alphas [0.5, 1.0]" in out


def test_geometric_checkpoints_and_the_new_rules_in_the_plan(capsys):
    # 1/32 … 1/2 of 8192: 256, 512, 1024, 2048, 4096 (whole batches of the largest branch batch, 64)
    br = resolve_branching(load_spec(LM, BRANCH + ["branch.checkpoints=geometric"]), 8192)
    assert br.checkpoints == (256, 512, 1024, 2048, 4096)
    for rule, words in (("fitted", "one batch below a power law fitted to CBS(t)"),
                        ("seesaw", "a doubling wherever the trunk's LR decay would halve the LR")):
        assert main(["--space", LM, "--dry-run", *_sets(BRANCH + [f"branch.schedule_rule={rule}"])]) == 0
        out = capsys.readouterr().out
        assert words in out and f"branch.schedule_rule: {rule}" in out and "deviation from the paper: the schedule" in out


def test_samples_of_branch_and_scratch_searches():
    br = resolve_branching(load_spec(LM, BRANCH), 8192)  # 16, 32, 64; window 512
    assert branch_search_samples(br) == 8192 + 3 * 3 * 512 == 12800
    assert branch_search_samples(br, validate_schedule=True) == 12800 + 5 * 5 * 8192
    assert scratch_search_samples(br) == 8192 * (1 + 3) == 32768
    # Repeats: every batch on 3 seeds, and the trunk's continuation on 2 more, from each checkpoint.
    br = resolve_branching(load_spec(LM, BRANCH + ["branch.repeats=3"]), 8192)
    assert branch_search_samples(br) == 8192 + 3 * (3 * 3 + 2) * 512


def test_validation_seeds_are_held_out_from_the_trunk_s():
    br = resolve_branching(load_spec(LM, BRANCH), 8192)  # the trunk: seed offset 0
    configs = validation_configs(br, [[0, 8], [1024, 16]], 0.5, [("small", 8), ("large", 16)])
    assert sorted({c["seed_offset"] for c in configs}) == [1, 2, 3, 4, 5]  # 5 validation seeds, none the trunk's
    # Every kind on every seed, the small batch included (its seed 0 was the trunk before issue 37).
    assert sorted((c["control"], c["seed_offset"]) for c in configs) == \
        sorted((k, s) for k in ("schedule", "small", "large") for s in (1, 2, 3, 4, 5))


def test_trial_names_say_role_batch_and_checkpoint():
    from types import SimpleNamespace

    from cbs_ray.tune.runner import _trial_name

    def name(config):
        return _trial_name(SimpleNamespace(config=config, trial_id="abc_00001"))

    assert name({"log2_batch": 4}) == "B16_abc_00001"
    assert name({"role": "trunk", "log2_batch": 3}) == "trunk_B8_abc_00001"
    assert name({"role": "branch", "log2_batch": 6, "start_samples": 2048, "alpha": 0.5}) == \
        "branch_B64_from2048_a0.5_abc_00001"
    assert name({"role": "schedule", "log2_batch": 3}) == "schedule_B8_abc_00001"
    assert name({"role": "branch", "log2_batch": 6, "start_samples": 2048, "alpha": 1.0, "seed_offset": 2}) == \
        "branch_B64_from2048_a1_s2_abc_00001"
    assert name({"role": "schedule", "log2_batch": 3, "start_samples": 0, "alpha": 0.5, "control": "small",
                 "seed_offset": 1}) == "small_B8_s1_abc_00001"


def test_each_run_says_what_it_does_through_its_plans_options_not_its_role():
    """Issue 46: the training loop asks a plan's typed options, which name no method; branch mode's runs set them as
    their roles meant before (the trunk publishes, a branch starts from its checkpoint, only the trunk measures the
    noise scale, every run's LR is laid out in samples), a from-scratch trial none of them."""
    from cbs_ray.methods.branch.runs import branch_configs, branch_run_plan, trunk_config
    from cbs_ray.train.run_plan import scratch_run_plan

    spec = load_spec(LM, BRANCH)
    br = resolve_branching(spec, 8192)
    runs = {"trunk": trunk_config(br, "/tmp/x"), "branch": branch_configs(br, "/tmp/x")[0],
            "schedule": validation_configs(br, [[0, 8], [1024, 16]], 0.5, [("small", 8)])[0]}
    options = ("publishes_checkpoints", "starts_from_checkpoint", "lr_in_samples", "fixes_micro_batch",
               "measures_noise_scale", "reports_train_loss_ema")
    found = {role: tuple(getattr(branch_run_plan(spec, br, point), o) for o in options) for role, point in runs.items()}
    assert found == {"trunk": (True, False, True, True, True, True), "branch": (False, True, True, True, False, True),
                     "schedule": (False, False, True, True, False, True)}
    assert branch_run_plan(spec, br, runs["branch"]).noise_scale_note == \
        "not measured on a branch-mode branch run (the trunk's is plotted)"
    scratch = scratch_run_plan(spec, 16, 0.5, 0.1, 8192)
    assert tuple(getattr(scratch, o) for o in options) == (False, False, False, False, True, False)
    assert scratch.noise_scale_note == "" and scratch.noise_micro_batch is None and scratch.title == ""


def test_probe_of_a_branch_spec_is_a_plain_trial():
    from cbs_ray.tune.probe import probe_spec

    probe = probe_spec(load_spec(LM, BRANCH + ["branch.validate_schedule=true"]))
    assert probe.search.method == "scratch" and not probe.branch.validate_schedule


def test_branch_mode_on_objects_needs_model_init_to_rebuild_one_architecture():
    """Issue 35: a branch loads the trunk's state dict, so two fresh models (for the trunk's trial and the largest
    branch's) must hold the same names and shapes; a model_init(trial) whose width follows the batch is refused in
    one line naming the first tensor that differs, one that does not passes."""
    import torch

    from cbs_ray.sources.object_checks import check_same_architecture
    from cbs_ray.sources.user_objects import user_objects

    class Net(torch.nn.Module):
        def __init__(self, width=4):
            super().__init__()
            self.layer = torch.nn.Linear(3, width)
            self.head = torch.nn.Linear(width, 2)

        def forward(self, x, labels):
            return {"loss": torch.nn.functional.cross_entropy(self.head(self.layer(x)), labels), "logits": x}

    items = [{"x": torch.ones(3), "labels": torch.tensor(i % 2)} for i in range(64)]
    spec = load_spec(None, ["search.metric=eval_loss", "search.mode=min"])
    same = user_objects(model_init=lambda trial: Net(), train_dataset=items, eval_dataset=items)
    check_same_architecture(spec, same, (16, 64))
    grows = user_objects(model_init=lambda trial: Net(trial["batch_size"] // 8), train_dataset=items,
                         eval_dataset=items)
    with pytest.raises(SpecError, match=r"^model_init: builds two different architectures .*: layer\.weight is "
                                        r"\(2, 3\) in one model and \(8, 3\) in the other$"):
        check_same_architecture(spec, grows, (16, 64))


def test_the_gpu_branch_space_gives_every_branch_the_step_floor():
    """gpt2_small_branch_gpu.yaml's data come from the hub (no dry run offline): its plan from the resolved
    section, 2^28 tokens = 262144 packed samples of 1024 tokens."""
    from cbs_ray.methods.branch.search import branch_outline_lines

    spec = load_spec("search_spaces/gpt2_small_branch_gpu.yaml")
    br = resolve_branching(spec, 262144, 1024)
    assert br.branch_batches == (128, 256, 512) and br.alphas == (0.5,) and br.tolerance == 0.01
    assert br.window_steps_at_largest >= br.window_min_steps == 8  # 12800 samples: 25 steps at 512
    lines = branch_outline_lines(spec, br)
    assert not any("warning" in line for line in lines)
    assert any("optimizer steps per window: B=128: 100, B=256: 50, B=512: 25" in line for line in lines)


def test_branch_mode_takes_the_spec_s_trackers():
    """Issue 35: trackers attach to every method; branch mode refused them ("not available with search.method
    branch yet")."""
    spec = load_spec(LM, BRANCH + ["tracking.tensorboard=true"])
    assert spec.tracking.tensorboard and spec.search.method == "branch"


def test_the_progress_display_reads_every_runs_span_off_its_plan():
    """Issue 35: the generic runner's progress display asks each trial's RunPlan (the experiment's ``TrialPlans``,
    built by the method on the driver) for its batch, start and stop, not the config's role strings: the trunk and
    a schedule run train the budget, a branch its window from its checkpoint, a from-scratch trial the budget, a
    ladder run to its own stop (2·D with ladder.validate)."""
    from cbs_ray.methods.branch.search import search_plans, validation_plans
    from cbs_ray.methods.ladder.search import ladder_plans
    from cbs_ray.spec.ladder_section import resolve_ladder
    from cbs_ray.train.trial_plans import SearchedPlans
    from cbs_ray.tune.runner import progress_display

    spec = load_spec(LM, BRANCH)
    budget = spec.training.budget_samples
    br = resolve_branching(spec, budget)
    plans = search_plans(spec, br, "/x")
    span = progress_display(spec, budget, 3, plans).span_of
    trunk, *branches = plans.points
    assert span(trunk) == (br.trunk_batch, 0, budget) and trunk["role"] == "trunk"
    branch = branches[-1]
    start = branch["start_samples"]
    assert span(branch) == (2 ** branch["log2_batch"], start, start + br.window_samples) and start > 0
    validation = validation_plans(spec, br, [[0, br.trunk_batch], [start, 2 * br.trunk_batch]], 0.5)
    schedule_run = validation.points[0]
    assert schedule_run["control"] == "schedule"
    assert progress_display(spec, budget, 1, validation).span_of(schedule_run) == (br.trunk_batch, 0, budget)
    scratch = load_spec(None)
    scratch_budget = scratch.training.budget_samples
    assert progress_display(scratch, scratch_budget, 1, SearchedPlans(scratch, scratch_budget)).span_of(
        {"log2_batch": 4, "alpha": 0.5, "warmup_fraction": 0.1}) == (16, 0, scratch_budget)
    ladder = load_spec(LM, ["search.method=ladder", "search.batch_sizes=[8, 16, 32, 64]", "ladder.validate=true"])
    ld = resolve_ladder(ladder, budget)
    run = ladder_plans(ld).points[0]
    # validated: every run may go on to ladder.cap x D (issue 36), the span the display counts
    assert progress_display(ladder, budget, 1, ladder_plans(ld)).span_of(run) == (ld.batches[0], 0, ld.run_stop)
    assert ld.run_stop == int(ld.cap * budget)


def test_a_resumed_branch_search_rebuilds_the_plans_its_trials_were_started_with():
    """Issue 35: a resumed trial finds its plan by its point (``PresetPlans``), so the plans ``resume`` rebuilds
    from the metadata (the checkpoint folder; the schedule and alpha read back from JSON, lists where the search had
    tuples) are the ones the search started: every restored point finds the same plan."""
    import json

    from cbs_ray.methods.branch.search import search_plans, validation_plans
    from cbs_ray.train.trial_plans import PresetPlans

    spec = load_spec(LM, BRANCH + ["branch.repeats=2", "branch.validation_seeds=2"])
    budget = spec.training.budget_samples
    started = search_plans(spec, resolve_branching(spec, budget), "/ray/exp/trunk_checkpoints")
    rebuilt = search_plans(spec, resolve_branching(spec, budget), "/ray/exp/trunk_checkpoints")
    assert started == rebuilt and all(rebuilt.plan(point) == plan for point, (_, plan) in
                                      zip(started.points, started.runs))
    schedule = ((0, 16), (budget // 4, 32))
    br = resolve_branching(spec, budget)
    first = validation_plans(spec, br, schedule, 0.5)
    recorded = json.loads(json.dumps({"batch_size_schedule": [list(p) for p in schedule], "alpha": 0.5}))
    again = validation_plans(spec, br, recorded["batch_size_schedule"], recorded["alpha"])
    assert first == again and {p["control"] for p in first.points} >= {"schedule", "small", "large"}
    assert [again.plan(p).seed_offset for p in first.points] == [p["seed_offset"] for p in first.points]
    with pytest.raises(ValueError, match="no run of this experiment"):
        PresetPlans.of(first.points[:1], lambda point: first.plan(point)).plan(first.points[-1])


@pytest.mark.parametrize("schedule, controls_from, repeats", [
    ([[0, 8]], "none", True),  # the trunk's batch throughout, untuned controls: the control at B=8 is this run
    ([[0, 8]], "scratch", False),  # tuned controls: the trunk's configuration against the tuned B=8 and the rest
    ([[0, 16]], "none", False),  # one batch, but not the trunk's (seesaw from the tuned batch)
    ([[0, 8], [2048, 16]], "none", False),  # the batch rises
])
def test_a_schedule_is_validated_unless_it_repeats_the_trunk_s_control(schedule, controls_from, repeats):
    from cbs_ray.methods.branch.search import _repeats_the_trunk

    spec = load_spec(LM, [*BRANCH, "branch.trunk_batch_size=8", f"branch.controls_from={controls_from}"])
    br = resolve_branching(spec, spec.training.budget_samples)
    assert _repeats_the_trunk(spec, br, schedule) is repeats
