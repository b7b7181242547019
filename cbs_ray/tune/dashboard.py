"""Where to watch a running search: the Ray dashboard's address, how to sign in, and which page shows what.

Ray 2.60 turns token authentication on for a local cluster that ``ray.init()`` starts (a search run without
``--address``): it creates a token in ``~/.ray/auth_token`` unless one exists (``RAY_AUTH_TOKEN`` or
``RAY_AUTH_TOKEN_PATH`` name another), and the dashboard asks for it; ``ray get-auth-token`` prints it. A
cluster started with ``ray start`` (as ``ray up`` does) uses tokens when ``RAY_AUTH_MODE=token`` is set or
a token file already exists on the head; the dashboard, ``ray job submit`` and every driver then need that
same token.
"""

from __future__ import annotations

import json
import os
from typing import Optional

from cbs_ray.ray_internals import dashboard_url, started_this_node, token_auth_enabled

__all__ = ["dashboard_lines", "monitoring_lines"]

JOB_CONFIG_ENV = "RAY_JOB_CONFIG_JSON_ENV_VAR"
"""Where Ray's job supervisor hands a submitted job's driver its metadata (its submission ID among them)."""


def dashboard_lines(url: str, *, token_auth: bool, started_here: bool,
                    submission_id: Optional[str] = None) -> list[str]:
    """What the search prints when it starts: the dashboard's address and how to authenticate, then what
    to look at. ``url`` as Ray gives it (``127.0.0.1:8265``, no scheme; empty without a dashboard)."""
    if not url:
        return ["dashboard: none (this Ray runs without one)"]
    address = url if "://" in url else f"http://{url}"
    if started_here:
        where = f"dashboard: {address}"
        token = "sign in with the token `ray get-auth-token` prints" if token_auth else "no token needed"
    else:
        where = (f"dashboard: {address} on the cluster's head (from your machine: `ray dashboard cluster.yaml`, "
                 f"then http://127.0.0.1:8265)")
        token = ("sign in with the token the cluster was started with (`ray get-auth-token` on the head prints it)"
                 if token_auth else "no token needed")
    pages = "Actors: the trials, and each trial's Train controller and workers (logs, CPU, memory)"
    if submission_id:
        pages = f"Jobs: this search, {submission_id}, with its driver's log; " + pages
    return [f"{where} ({token})", f"  {pages}"]


def monitoring_lines(context=None) -> list[str]:
    """``dashboard_lines`` for the Ray this process is connected to; ``context`` is what ``ray.init``
    returned (None: Ray was already up, or started elsewhere)."""
    url = getattr(context, "dashboard_url", None)
    if url is None:
        try:
            url = dashboard_url()
        except Exception:
            url = ""
    metadata = json.loads(os.environ.get(JOB_CONFIG_ENV) or "{}").get("metadata") or {}
    return dashboard_lines(url, token_auth=token_auth_enabled(), started_here=started_this_node(),
                           submission_id=metadata.get("job_submission_id"))


