"""What a search prints about the dashboard when it starts (issue 20): no Ray."""

from cbs_ray.tune.dashboard import dashboard_lines


def test_a_local_search_names_the_dashboard_and_the_command_that_prints_its_token():
    lines = dashboard_lines("127.0.0.1:8265", token_auth=True, started_here=True)
    assert lines[0] == "dashboard: http://127.0.0.1:8265 (sign in with the token `ray get-auth-token` prints)"
    assert "Actors: the trials, and each trial's Train controller and workers" in lines[1]
    assert "Jobs" not in lines[1]  # a search run with python -m cbs_ray.search is not a Ray Job


def test_a_submitted_search_points_at_the_head_the_cluster_token_and_its_job():
    lines = dashboard_lines("127.0.0.1:8265", token_auth=True, started_here=False, submission_id="raysubmit_abc")
    assert lines[0].startswith("dashboard: http://127.0.0.1:8265 on the cluster's head (from your machine: "
                               "`ray dashboard cluster.yaml`")
    assert "the token the cluster was started with (`ray get-auth-token` on the head prints it)" in lines[0]
    assert lines[1].strip().startswith("Jobs: this search, raysubmit_abc, with its driver's log; Actors:")


def test_without_token_authentication_or_a_dashboard():
    assert dashboard_lines("http://10.0.0.5:8265", token_auth=False, started_here=False)[0].endswith(
        "(no token needed)")
    assert dashboard_lines("", token_auth=True, started_here=True) == ["dashboard: none (this Ray runs without one)"]
