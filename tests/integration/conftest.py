"""Fixtures of the integration tests that drive a real browser.

``browser``: Debian's chromium under selenium, headless, with a fresh profile that is removed at
teardown; page loads time out after WAIT_S and element look-ups wait up to 5 s. Skips the test
when chromium or chromium-driver is missing (``make install-test`` installs both).
"""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

WAIT_S = 30
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


@pytest.fixture
def browser():
    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        pytest.skip("chromium and chromium-driver are not installed (make install-test does it)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="chronolog-chrome-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={profile}",
        "--window-size=1280,900",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(WAIT_S)
    driver.implicitly_wait(5)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
