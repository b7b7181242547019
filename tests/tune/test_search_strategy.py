"""The search strategies' configurations (pure: no Ray)."""

from cbs_ray.spec.load import load_spec
from cbs_ray.tune.search_space import grid_points, num_trials, outline_lines


def test_grid_is_every_batch_by_evenly_spaced_alphas_and_warmups():
    spec = load_spec(None, ["search.strategy=grid", "search.early_stopping=false", "search.batch_sizes=[16, 64]",
                            "search.alpha_range=[0.5, 1.0]", "search.warmup_fraction_range=[0.0, 0.2]"])
    points = grid_points(spec)
    assert len(points) == 2 * 3 * 3 == num_trials(spec)
    assert points[0] == {"log2_batch": 4, "alpha": 0.5, "warmup_fraction": 0.0}
    assert points[4] == {"log2_batch": 4, "alpha": 0.75, "warmup_fraction": 0.1}  # the middle of both ranges
    assert points[-1] == {"log2_batch": 6, "alpha": 1.0, "warmup_fraction": 0.2}
    assert "18 trials (grid, no early stopping)" in outline_lines(spec, 16384)[0]


def test_one_grid_point_takes_the_low_end():
    spec = load_spec(None, ["search.strategy=grid", "search.early_stopping=false", "search.grid_points=1",
                            "search.batch_sizes=[16]", "search.alpha_range=[0.5, 1.0]"])
    assert grid_points(spec) == [{"log2_batch": 4, "alpha": 0.5, "warmup_fraction": 0.0}]


def test_tpe_and_random_use_num_trials():
    assert num_trials(load_spec(None, ["search.num_trials=7"])) == 7
    assert num_trials(load_spec(None, ["search.strategy=random", "search.num_trials=9"])) == 9


def test_seeded_warmup_grows_with_the_batch_and_does_not_depend_on_the_grid():
    from cbs_ray.maths.lr_schedule import seed_warmup_fraction as seed_warmup
    from cbs_ray.tune.search_space import per_batch_space

    # Warmup [0, 0.2], B0 = 16: the middle at B0, an eighth of the range per doubling, the ends 4 doublings away.
    assert [seed_warmup([0.0, 0.2], b, 16) for b in (1, 4, 8, 16, 32, 64, 128, 256, 512)] == \
        [0.0, 0.05, 0.075, 0.1, 0.125, 0.15, 0.175, 0.2, 0.2]
    assert seed_warmup([0.05, 0.1], 64, 64) == 0.075  # the middle of any range at B0

    # Issue 28: B=8 was seeded with warmup 0 in an 8…128 grid and 0.067 in a 4…32 grid (the range spread over
    # the grid); now with the same warmup in both, as every batch size both grids hold.
    def seeds(grid):
        _, points = per_batch_space(load_spec(None, [f"search.batch_sizes={grid}", "search.num_trials=5"]))
        return {2 ** p["log2_batch"]: p[f"warmup_fraction_B{2 ** p['log2_batch']}"] for p in points
                if f"warmup_fraction_B{2 ** p['log2_batch']}" in p}

    wide, narrow = seeds("{min: 8, max: 128}"), seeds("{min: 4, max: 32}")
    assert wide[8] == narrow[8] == 0.075 and wide[32] == narrow[32] == 0.125


def test_balanced_batches_fix_every_trials_batch_and_keep_alpha_per_batch():
    import optuna

    from cbs_ray.tune.search_space import per_batch_space

    spec = load_spec(None, ["search.batch_sizes=[16, 64, 256]", "search.num_trials=8", "search.balance_batches=true",
                            "search.alpha_range=[0.5, 1.0]"])
    space, points = per_batch_space(spec)
    assert [p["log2_batch"] for p in points] == [4, 6, 8, 4, 6, 8, 4, 6]  # seeds, then round robin
    assert points[2] == {"log2_batch": 8, "alpha_B256": 0.75, "warmup_fraction_B256": 0.2}
    # The space through Optuna itself: a point that fixes only the batch gets alpha and warmup of that batch.
    import pickle

    space = pickle.loads(pickle.dumps(space))  # Tune pickles the searcher with its space
    study = optuna.create_study(direction="maximize")
    for point in points[:4]:
        study.enqueue_trial(point)
    params = []
    for _ in range(4):
        trial = study.ask()
        config = space(trial)
        params.append((trial.params, config))
        study.tell(trial, 0.5)
    fourth_params, fourth_config = params[3]
    assert set(fourth_params) == {"log2_batch", "alpha_B16", "warmup_fraction_B16"}
    assert fourth_config["alpha"] == fourth_params["alpha_B16"] and 0.5 <= fourth_config["alpha"] <= 1.0


def test_the_plan_says_whether_micro_batches_will_be_probed():
    def last_line(*overrides):
        return outline_lines(load_spec(None, ["search.batch_sizes=[16, 64]", *overrides]), 16384)[-1]

    assert last_line().startswith("  B=64 = 32 micro × 2 accum")  # no probe: nothing added
    assert "fits within 2.0 GiB per worker" in last_line("training.probe_micro_batch=true", "training.memory_limit_gb=2")
    assert "not probed (a CPU probe needs training.memory_limit_gb)" in last_line("training.probe_micro_batch=true")
    assert "fits on a GPU" in last_line("training.probe_micro_batch=true", "resources.use_gpu=true")


def test_bisect_plans_at_most_every_alpha_and_every_other_batch_once_and_says_what_it_saves():
    from cbs_ray.methods.scratch.search import search_outline_lines

    spec = load_spec(None, ["search.strategy=bisect"])  # the default's grid: 16..512, 3 alphas
    assert num_trials(spec) == 3 + 6 - 1
    lines = search_outline_lines(spec, 7168)
    assert "up to 8 trials (bisect, ASHA early stopping)" in lines[0]
    assert ("alpha chosen once at B=128 among [0.625, 0.5, 0.75] (each trains to 1024 samples and waits until all "
            "have; then 0.625 goes on, the best other too only where it leads by more than the tolerance 1 % of the "
            "prior's metric, the rest stop; alpha is the best at the full budget)") in lines[-3]
    # 6 batches once + 2 losing candidates at 1024 of 7168 samples = 6.29 runs' samples: 1.05 of one run per batch
    # (6 runs; the headline, issue 47: the worst case costs more than the plain alternative), 0.116 of 54 runs
    assert ("at most 6.29 runs' samples (45056) where no other alpha leads (+0.857 where one does) = 1.05 of one run "
            "per batch at the prior alpha (6 runs), 0.116 of the exhaustive grid (54 runs") in lines[-2]
    assert "first 4096 examples (an accuracy's standard error at most 0.0078)" in lines[-4]
    # the walk on a clean threshold (maths.minimax_walk): 128 costs 16, 128, 256, 64, four runs; no answer five
    assert lines[-1] == ("  full runs by answer where the outcomes are a clean threshold: 16: 3, 32: 4, 64: 4, 128: 4, "
                         "256: 4, 512: 4 (worst 4; e.g. 128: 16 128 256 64)")


def test_bisect_searcher_hands_out_the_policys_runs_and_reads_how_each_ended():
    import math

    from ray.tune.search import Searcher

    from cbs_ray.maths.bisection import Run
    from cbs_ray.methods.scratch.bisection_search import BisectionSearcher

    spec = load_spec(None, ["search.strategy=bisect", "search.batch_sizes=[16, 32, 64]"])
    searcher = BisectionSearcher.for_spec(spec, 7168)
    configs = [searcher.suggest(f"t{i}") for i in range(4)]
    # alpha at 32 (3 candidates) and B=16 (= base_batch: its LR does not depend on alpha); then it waits
    assert [c["log2_batch"] for c in configs[:3]] == [5, 5, 5] and configs[3]["log2_batch"] == 4
    assert configs[0]["warmup_fraction"] == 0.125 and configs[3]["warmup_fraction"] == 0.1  # the seed rule
    assert searcher.suggest("t4") is None
    done = {"samples_seen": 7168, "accuracy": 0.9}
    searcher.on_trial_complete("t0", {**done, "accuracy": 0.80})
    searcher.on_trial_complete("t1")  # stopped while it waited paused at the rung (Tune gives no result)
    searcher.on_trial_complete("t2", {"samples_seen": 2048, "accuracy": 0.95})  # stopped early: not a measurement
    searcher.on_trial_complete("t3", {**done, "diverged": True})  # NaN: outside the tolerance
    assert searcher.policy.results[Run(32, 0.5)] is None and searcher.policy.results[Run(32, 0.75)] is None
    # candidates 0.625 (t0: 0.80), 0.5 and 0.75 stopped: 0.625; B=16 diverged (NaN, not within tolerance)
    assert searcher.policy.alpha == 0.625 and math.isnan(searcher.policy.results[Run(16, 0.625)])
    assert searcher.suggest("t5")["log2_batch"] == 6  # above 32 (the reading): the open top's middle, 64
    searcher.on_trial_complete("t5", {**done, "accuracy": 0.5})
    assert searcher.suggest("t6") == Searcher.FINISHED and searcher.expected_trials() == 5
