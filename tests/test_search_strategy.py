"""The search strategies' configurations (pure: no Ray)."""

from cbs_ray.search import grid_points, num_trials, plan_lines
from cbs_ray.spec import load_spec


def test_grid_is_every_batch_by_evenly_spaced_alphas_and_warmups():
    spec = load_spec(None, ["search.strategy=grid", "search.early_stopping=false", "search.batch_sizes=[16, 64]",
                            "search.alpha_range=[0.5, 1.0]", "search.warmup_fraction_range=[0.0, 0.2]"])
    points = grid_points(spec)
    assert len(points) == 2 * 3 * 3 == num_trials(spec)
    assert points[0] == {"log2_batch": 4, "alpha": 0.5, "warmup_fraction": 0.0}
    assert points[4] == {"log2_batch": 4, "alpha": 0.75, "warmup_fraction": 0.1}  # the middle of both ranges
    assert points[-1] == {"log2_batch": 6, "alpha": 1.0, "warmup_fraction": 0.2}
    assert "18 trials (grid, no early stopping)" in plan_lines(spec, 16384)[0]


def test_one_grid_point_takes_the_low_end():
    spec = load_spec(None, ["search.strategy=grid", "search.early_stopping=false", "search.grid_points=1",
                            "search.batch_sizes=[16]", "search.alpha_range=[0.5, 1.0]"])
    assert grid_points(spec) == [{"log2_batch": 4, "alpha": 0.5, "warmup_fraction": 0.0}]


def test_tpe_and_random_use_num_trials():
    assert num_trials(load_spec(None, ["search.num_trials=7"])) == 7
    assert num_trials(load_spec(None, ["search.strategy=random", "search.num_trials=9"])) == 9


def test_seeded_warmup_grows_with_the_batch_across_the_range():
    from cbs_ray.search import seed_warmup

    # 5 batch sizes over warmup [0, 0.2]: the smallest gets 0, the largest 0.2, evenly in log2 B between.
    assert [seed_warmup([0.0, 0.2], i, 5) for i in range(5)] == [0.0, 0.05, 0.1, 0.15, 0.2]
    assert seed_warmup([0.0, 0.2], 0, 1) == 0.1  # one batch size: the middle
