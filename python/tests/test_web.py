"""The coordinator's live web page in a real browser: headless Chromium (Debian's chromium and
chromium-driver, driven by selenium) loads it from a running cluster of `coflow` processes while
a coflow moves, and the test reads what it shows: the policy, the agents, the coflow listed with a
rate, its progress and the refresh counter moving, then the completion in the CCT histogram. A
screenshot is kept at target/web-page.png."""

from __future__ import annotations

import re
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Iterator

import coflow
import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

from conftest import REPO, Cluster

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[webdriver.Chrome]:
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    # No sandbox as root, and no background traffic: this machine reaches no network.
    for flag in [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1280,900",
        f"--user-data-dir={tmp_path / 'chromium'}",
    ]:
        opts.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    driver.set_page_load_timeout(20)
    yield driver
    driver.quit()


def wait(what: str, check, seconds: float = 20.0):
    deadline = time.monotonic() + seconds
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"the page never showed {what}")
        time.sleep(0.1)


def test_the_live_page_shows_coflows_rates_agents_and_histograms(coflow_bin: Path, tmp_path: Path, browser) -> None:
    # Ports capped at 2 MB/s and no bypass: a 6 MB piece takes about 3 s, scheduled by the policy.
    cluster = Cluster(coflow_bin, tmp_path, agents=2, port_rate="16Mbps", coordinator_args=["--bypass-threshold-bytes", "0"])
    try:
        with cluster.client(0) as c, cluster.client(1) as r:
            idle = c.register(1, name="web-idle")
            coflow = c.register(1, name="web-shuffle", parents=[idle])
            c.put(coflow, "piece", bytes(6_000_000))
            got = {}
            reader = threading.Thread(target=lambda: got.setdefault("data", r.get(coflow, "piece")))
            reader.start()
            browser.get(cluster.http + "/")
            assert wait("the policy", lambda: browser.find_element(By.ID, "policy").text == "varys")
            row = wait(
                "the coflow with a rate",
                lambda: [
                    tr for tr in browser.find_elements(By.CSS_SELECTOR, "#coflows tr")
                    if "web-shuffle" in tr.text and "bit/s" in tr.find_element(By.CLASS_NAME, "rate").text
                ],
            )[0]
            assert row.get_attribute("data-coflow") == str(coflow)
            cells = [td.text for td in row.find_elements(By.TAG_NAME, "td")]
            assert cells[2] == "1" and cells[3] == "5.7 MiB", cells  # width 1, 6,000,000 bytes
            assert cells[9] == str(idle), cells  # it joined its parent's job
            # A coflow with nothing in flight shows no share sent, not a full bar.
            idle_row = next(tr for tr in browser.find_elements(By.CSS_SELECTOR, "#coflows tr") if "web-idle" in tr.text)
            assert idle_row.find_elements(By.TAG_NAME, "td")[4].text == "-", idle_row.text
            assert idle_row.find_elements(By.TAG_NAME, "td")[9].text == "-", "a job of its own names none"
            agents = browser.find_elements(By.CSS_SELECTOR, "#agents tr")
            assert [a.get_attribute("data-machine") for a in agents] == ["0", "1"]
            assert all("alive" in a.text for a in agents)
            # Live: the refresh counter and the coflow's progress move while the bytes flow.
            first = int(browser.find_element(By.ID, "updated").get_attribute("data-refreshes"))
            progress = lambda: next(
                (tr.find_elements(By.TAG_NAME, "td")[4].text for tr in browser.find_elements(By.CSS_SELECTOR, "#coflows tr")
                 if "web-shuffle" in tr.text), None)  # fmt: skip
            p0 = progress()
            wait("another refresh", lambda: int(browser.find_element(By.ID, "updated").get_attribute("data-refreshes")) > first)
            wait("the progress moving", lambda: progress() not in (None, p0))
            (REPO / "target").mkdir(exist_ok=True)
            browser.save_screenshot(str(REPO / "target" / "web-page.png"))
            reader.join(timeout=30)
            assert got["data"] == bytes(6_000_000)
            # The completion reaches the CCT histogram; decisions were timed.
            wait("the completion", lambda: browser.find_element(By.ID, "cct-summary").text.startswith("1 observed"))
            assert "observed, mean" in browser.find_element(By.ID, "decision-summary").text
            c.unregister(coflow)
            c.unregister(idle)
            wait("no coflow", lambda: browser.find_element(By.ID, "coflow-count").text == "0")
    finally:
        cluster.stop()


def test_the_live_page_shows_members_names_as_text_and_escapes_what_would_hide(
    coflow_bin: Path, tmp_path: Path, browser
) -> None:
    # A member names its coflows as it likes (up to 256 bytes, no control characters): markup, a
    # script's end, characters that reorder or hide text, one long word.
    names = {
        "markup": '<img src=x onerror="document.title=\'owned\'"></script><script>document.title="owned"</script>',
        "reordered": "job\u202etxt.exe\u200b\u2066\U000e0041\u2028é日本",
        "long": "x" * 256,
    }
    cluster = Cluster(coflow_bin, tmp_path, agents=1)
    try:
        with cluster.client(0) as c:
            ids = {key: c.register(1, name=name) for key, name in names.items()}
            # Control characters (a line break, a terminal's escapes) are refused, naming the field.
            with pytest.raises(coflow.Invalid, match="options.name"):
                c.register(1, name="a\tb\nc\x1b[2J\x07")
            # What `coflow status` shows of each name, the table's column between the id and `puts`.
            table = subprocess.run(
                [str(coflow_bin), "status", "--coordinator", cluster.coordinator],
                env=cluster.env, check=True, capture_output=True, text=True,
            ).stdout  # fmt: skip
            shown_by_cli = {int(m[1]): m[2] for m in re.finditer(r"coflow +(\d+) (.*?) +puts \d+/", table)}
            browser.get(cluster.http + "/")
            wait("every coflow", lambda: browser.find_element(By.ID, "coflow-count").text == str(len(names)))
            cells = {
                int(tr.get_attribute("data-coflow")): tr.find_elements(By.TAG_NAME, "td")[1]
                for tr in browser.find_elements(By.CSS_SELECTOR, "#coflows tr")
            }
            # Markup is text: no element made from it, nothing run.
            assert cells[ids["markup"]].text == names["markup"]
            assert not browser.find_elements(By.CSS_SELECTOR, "#coflows img, #coflows script")
            assert browser.title == "coflow"
            # What reorders or hides text shows escaped, exactly as `coflow status` shows it.
            text = cells[ids["reordered"]].get_attribute("textContent")
            assert text == shown_by_cli[ids["reordered"]], (text, shown_by_cli[ids["reordered"]])
            assert cells[ids["reordered"]].text.startswith("job\\u{202e}txt.exe\\u{200b}")
            # A long word wraps in its cell rather than pushing the page past the window.
            width = browser.execute_script("return [document.documentElement.scrollWidth, window.innerWidth]")
            assert width[0] <= width[1], width
    finally:
        cluster.stop()
