"""Debian's Chromium, headless, driven through its chromedriver (Selenium), and the explorer
started as `tracejudge ui` would be: what the browser tests look through."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.remote.webdriver import WebDriver

from tests.realservices import ROOT, free_port, stop_process

# the test run's screenshots, one per page looked at (build/ is not committed)
SCREENSHOTS = ROOT / "build" / "screenshots"


def chromium() -> tuple[str, str]:
    """The system browser and its driver (scripts/ensure-services.sh installs both)."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver") or "/usr/lib/chromium/chromedriver"
    if browser is None or not os.path.exists(driver):
        raise AssertionError(
            "Chromium and its driver are missing: run scripts/ensure-services.sh "
            "(Debian: apt-get install chromium chromium-driver)"
        )
    return browser, driver


@contextmanager
def browser() -> Iterator[WebDriver]:
    binary, driver_path = chromium()
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for arg in (
        "--headless=new",
        "--no-sandbox",  # root in a container has no user namespaces for Chromium's sandbox
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1280,1000",
    ):
        options.add_argument(arg)
    # both paths given, so Selenium Manager never tries to download a browser or driver
    driver = webdriver.Chrome(options=options, service=Service(driver_path))
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def screenshot(driver: WebDriver, name: str) -> Path:
    """The whole page, not only the window, under build/screenshots/."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    capture_page(driver, path)
    assert path.stat().st_size > 10_000, f"{path}: a blank page?"
    return path


def capture_page(driver: WebDriver, path: Path) -> None:
    """The whole page, beyond the window, through the DevTools protocol."""
    size = driver.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]  # type: ignore[attr-defined]
    shot = driver.execute_cdp_cmd(  # type: ignore[attr-defined]
        "Page.captureScreenshot",
        {
            "format": "png",
            "captureBeyondViewport": True,
            "clip": {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1},
        },
    )
    path.write_bytes(base64.b64decode(shot["data"]))


def capture_element(driver: WebDriver, path: Path, element_id: str, margin: int = 12) -> None:
    """One element of the page, whole (beyond the window too), with a margin around it."""
    box = driver.execute_script(
        "const r = document.getElementById(arguments[0]).getBoundingClientRect();"
        "return [r.left + window.scrollX, r.top + window.scrollY, r.width, r.height];",
        element_id,
    )
    x, y, width, height = (float(v) for v in box)
    shot = driver.execute_cdp_cmd(  # type: ignore[attr-defined]
        "Page.captureScreenshot",
        {
            "format": "png",
            "captureBeyondViewport": True,
            "clip": {"x": max(0.0, x - margin), "y": max(0.0, y - margin),
                     "width": width + 2 * margin, "height": height + 2 * margin, "scale": 1},
        },
    )  # fmt: skip
    path.write_bytes(base64.b64decode(shot["data"]))


@contextmanager
def explorer(env: dict[str, str], log: Path) -> Iterator[str]:
    """`tracejudge ui` on a free loopback port; yields its base URL once it answers."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "tracejudge.streams.cli", "ui"],
        cwd=ROOT,
        env={**os.environ, **env, "TRACEJUDGE_UI_PORT": str(port)},
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _answers(base), 60, lambda: log.read_text(errors="replace"))
        yield base
    finally:
        stop_process(process)


def _answers(base: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base}/health", timeout=2) as resp:
            return bool(json.loads(resp.read())["status"] == "ok")
    except (urllib.error.URLError, OSError, ValueError):
        return False


def wait_until(done: Callable[[], bool], timeout_s: float, why: Callable[[], str]) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"not after {timeout_s}s:\n{why()[-3000:]}")
        time.sleep(0.3)
