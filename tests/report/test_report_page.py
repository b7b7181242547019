"""report.html as a user opens it: rendered by headless Chromium (Debian's ``chromium`` package), every
embedded image must load and the page must fit the window's width (no sideways scrolling). No Ray: the
report comes from a hand-made history. Skipped where Chromium is not installed (``.ci/run`` installs it)."""

import re
import shutil
import subprocess

import pytest

from cbs_ray.methods.scratch.reading import summarize
from cbs_ray.methods.scratch.report import Report
from helpers.report import BUDGET, history

CHROMIUM = shutil.which("chromium")

# Injected into a copy of the page: after load, write what a reader would see into <body data-…>, which
# --dump-dom prints. Images are data: URIs, decoded by the load event.
PROBE = """<script>window.addEventListener("load", () => {
  const images = [...document.images];
  const loaded = images.filter(i => i.complete && i.naturalWidth > 0).length;
  document.body.dataset.images = loaded + "/" + images.length;
  document.body.dataset.fits = String(document.documentElement.scrollWidth <= window.innerWidth);
});</script>"""


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (apt-get install chromium)")
def test_the_report_page_loads_every_image_and_fits_the_width(tmp_path):
    s = summarize(history(), metric="accuracy", mode="max", budget_samples=BUDGET, target=0.8)
    page = Report(s, history(), str(tmp_path)).write(tmp_path / "report")
    probed = tmp_path / "probed.html"
    probed.write_text(page.read_text().replace("</body>", PROBE + "</body>"))
    dom = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path / 'p'}",
                          "--window-size=1280,2000", "--virtual-time-budget=5000", "--dump-dom", probed.as_uri()],
                         capture_output=True, text=True, timeout=120).stdout
    body = re.search(r"<body[^>]*>", dom)
    assert body, dom[-2000:]
    assert 'data-images="5/5"' in body.group(0), body.group(0)
    assert 'data-fits="true"' in body.group(0), body.group(0)
    assert "Critical batch: ≥ 256" in dom


def test_a_users_metric_name_is_escaped_on_the_page():
    # Issue 40: a metric name (any key compute_metrics returns) went into the page unescaped.
    import dataclasses

    from cbs_ray.methods.scratch.page import render_html

    s = summarize(history(), metric="accuracy", mode="max", budget_samples=BUDGET, target=0.8)
    page = render_html(dataclasses.replace(s, metric="acc<script>x()</script>"), {})
    assert "<script>" not in page and "acc&lt;script&gt;" in page
