"""The decision's next step carries what the experiment searched, not the settings of a method it did not run."""

import json

from cbs_ray.analysis.decision import search_command
from cbs_ray.report.reading import next_search_of
from cbs_ray.spec.load import load_spec, spec_to_dict


def _stored(sets):
    return json.loads(json.dumps(spec_to_dict(load_spec(None, sets))))


def test_a_from_scratch_search_s_next_step_leaves_out_the_ladder_settings_its_space_holds():
    spec = _stored(["training.budget_samples=4096", "ladder.fraction=0.5", "ladder.min_steps=8"])
    assert search_command(next_search_of(spec)) == "cbs-ray search --set training.budget_samples=4096"


def test_a_ladder_search_s_next_step_keeps_its_own_section():
    spec = _stored(["training.budget_samples=65536", "search.method=ladder", "ladder.fraction=0.5"])
    assert search_command(next_search_of(spec)) == ("cbs-ray search --set training.budget_samples=65536 "
                                                     "--set search.method=ladder --set ladder.fraction=0.5")
