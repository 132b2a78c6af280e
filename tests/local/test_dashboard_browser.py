"""The dashboard in a real headless Chromium (issue 17 item 3's proof).

Debian's ``chromium`` driven by selenium through Debian's ``chromium-driver`` (never a
downloaded browser or driver: both paths are given, Selenium Manager is kept offline),
against the real ``dethpc dashboard`` serving a store as the reconciler leaves it
(``tests/dashboard_seed.py``): the URL with the token lists the finished experiment;
its page draws the learning curves (an inline ``<svg>`` whose paths have points) and the
trials; a trial's page shows Slurm's pending reason and the tail of its log; a browser
with no token or a wrong one is refused. Screenshots are kept under the test's tmp dir.
Skipped (with the reason) only where chromium or its driver is not installed, and never
under ``CI=true`` (CI has root and Debian: scripts/setup.sh installs them), where it fails.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import in_ci
from tests.dashboard_seed import LOG_LINES, Dashboard, seed

CHROMIUM = shutil.which("chromium")
DRIVER = shutil.which("chromedriver")
if (CHROMIUM is None or DRIVER is None) and in_ci():
    pytest.fail("CI=true makes the dashboard's browser test mandatory, but Debian's chromium "
                "or chromium-driver is missing (scripts/setup.sh --tests installs them as root)",
                pytrace=False)
if CHROMIUM is None or DRIVER is None:
    pytest.skip("needs Debian's chromium and chromium-driver (scripts/setup.sh --tests installs "
                "them as root: apt-get install chromium chromium-driver)",
                allow_module_level=True)
webdriver = pytest.importorskip(
    "selenium.webdriver", reason="needs selenium: pip install -e '.[browser-test]'")
from selenium.webdriver.chrome.service import Service  # noqa: E402

#: how long the browser may take to draw something (a loaded 2-core machine)
PATIENCE_S = 20.0


@pytest.fixture(scope="module")
def served_and_browser(tmp_path_factory: pytest.TempPathFactory,
                       ) -> Iterator[tuple[Dashboard, dict[str, Any], Any]]:
    """The real ``dethpc dashboard`` over a seeded store and a headless Chromium, started
    side by side (each takes seconds)."""
    home = tmp_path_factory.mktemp("home")
    ids = seed(home)
    proc = Dashboard.spawn(home)
    os.environ["SE_OFFLINE"] = "true"   # Selenium Manager must never download anything
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1280,1000", "--no-first-run", "--disable-extensions",
                f"--user-data-dir={tmp_path_factory.mktemp('chromium')}"):
        opts.add_argument(arg)
    try:
        driver = webdriver.Chrome(service=Service(executable_path=DRIVER), options=opts)
    except BaseException:
        proc.kill()
        raise
    try:
        dash = Dashboard.attach(proc)
    except BaseException:
        driver.quit()
        raise
    try:
        yield dash, ids, driver
    finally:
        driver.quit()
        dash.stop()


def wait_for(what: str, check: Callable[[], Any], timeout: float = PATIENCE_S) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.1)


def body_text(driver: Any) -> str:
    # one script: an element found by one WebDriver call may be redrawn by the next
    return str(driver.execute_script("return document.body.innerText"))


def test_refused_without_the_token_then_lists_curves_and_logs(
        served_and_browser: tuple[Dashboard, dict[str, Any], Any], tmp_path: Path) -> None:
    dash, ids, browser = served_and_browser
    # no token, then a wrong one: refused, and no experiment shown
    browser.get(dash.base + "/")
    assert "401" in body_text(browser) and "finished-sweep" not in browser.page_source
    browser.get(dash.base + "/?token=not-the-token")
    assert "403" in body_text(browser) and "finished-sweep" not in browser.page_source
    browser.save_screenshot(str(tmp_path / "refused.png"))

    # the printed URL: the token becomes a cookie and leaves the address bar
    browser.get(dash.url)
    wait_for("the experiment list", lambda: "finished-sweep" in body_text(browser))
    assert "token=" not in browser.current_url
    assert "someone-elses" not in body_text(browser)   # another user's experiment
    # no daemon runs for this store: the list says its open experiments are not updated
    assert "No dethpc daemon is running: the 2 open experiment(s)" in body_text(browser)
    browser.save_screenshot(str(tmp_path / "experiments.png"))

    # the finished experiment: its curves drawn in an inline svg, the best one on top
    browser.get(f"{dash.base}/#/e/{ids['finished']}")

    def curves() -> list[tuple[str, bool, str]]:
        # read in one script: the page redraws as it polls, so an element found by one
        # WebDriver call can be stale by the next (CI saw StaleElementReferenceException)
        got = browser.execute_script(
            "return Array.from(document.querySelectorAll('svg#curves path.curve'))"
            ".map(p => [p.getAttribute('d') || '', p.classList.contains('best'),"
            " p.getAttribute('data-trial') || ''])")
        return [(str(d), bool(b), str(t)) for d, b, t in got]
    drawn = wait_for("four drawn curves", lambda: (c := curves()) and len(c) == 4 and c)
    assert all(d.startswith("M") and d.count("L") == 4 for d, _, _ in drawn), drawn
    assert [t for _, is_best, t in drawn if is_best] == [str(ids["best_trial"])], drawn
    box = browser.execute_script(      # in one script, as curves(): the svg is redrawn
        "const r = document.getElementById('curves').getBoundingClientRect();"
        "return {width: r.width, height: r.height};")
    assert box["width"] > 300 and box["height"] > 100
    text = body_text(browser)
    assert "COMPLETED" in text and "ck-2-50" in text   # trials, best checkpoint
    assert "<b>no markup</b>" in text                   # an event's text, not HTML
    browser.save_screenshot(str(tmp_path / "experiment.png"))

    # a waiting trial: Slurm's pending reason, the tail of its log
    browser.get(f"{dash.base}/#/t/{ids['waiting_trial']}")
    pending, log = wait_for("the pending reason", lambda: browser.execute_script(
        "const p = document.getElementById('pending'), l = document.getElementById('log');"
        "return p && l ? [p.innerText, l.textContent] : null;"))
    assert "QOSMaxJobsPerUserLimit" in pending
    assert log.splitlines()[-1] == f"log line {LOG_LINES - 1}"
    assert "log line 0\n" not in log
    browser.save_screenshot(str(tmp_path / "trial.png"))
    # a 2x2 trial whose rank 3 is slow (issue 35 item 4): the rank and its node
    browser.get(f"{dash.base}/#/t/{ids['straggling_trial']}")
    slow = wait_for("the straggler", lambda: browser.execute_script(
        "const s = document.getElementById('straggler'); return s ? s.innerText : null;"))
    assert slow.startswith("slowest rank: rank 3 on n2: 100% over the median"), slow
    if os.environ.get("DETHPC_DASHBOARD_SCREENSHOT_DIR"):   # to refresh docs/img
        out = Path(os.environ["DETHPC_DASHBOARD_SCREENSHOT_DIR"])
        browser.get(f"{dash.base}/#/e/{ids['finished']}")
        wait_for("the curves again", lambda: len(curves()) == 4)
        browser.save_screenshot(str(out / "dashboard-experiment.png"))
