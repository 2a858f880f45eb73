"""The web console in a real browser (issue 31): Debian's chromium, headless, driven by
Selenium through Debian's chromedriver (nothing downloaded). A person logs in, searches
with a filter, opens a document, downloads it (the archive's SHA-256), uploads a scan and
sees it arrive; an owner re-queues a document in attention; a readonly member sees no
edit control and is refused when posting one anyway; another tenant is 404. The main
pages are saved as screenshots for the README (docs/screenshots/)."""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from tests.conftest import wait_until
from tests.fixtures.files import pdf_bytes, write
from tests.fixtures.web import PASSWORD, Console

REPO = Path(__file__).resolve().parents[2]
# `make screenshots` sets this to docs/screenshots (the README shows them); otherwise the
# pictures are taken all the same, into the test's own directory, and the tree stays clean.
SHOTS_ENV = "INGESTD_SCREENSHOTS"


def _browser_parts() -> tuple[str, str]:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver") or "/usr/bin/chromedriver"
    if browser is None or not Path(driver).exists():
        pytest.fail(
            "Debian's chromium and chromium-driver are needed (the Makefile's APT_PACKAGES): "
            "apt-get install chromium chromium-driver",
            pytrace=False,
        )
    return browser, driver


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[WebDriver]:
    """Headless chromium with downloads into tmp_path/downloads, English."""
    binary, driver = _browser_parts()
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for arg in (
        "--headless=new",
        "--no-sandbox",  # tests run as root
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1200,900",
        "--lang=en-US",
        f"--user-data-dir={tmp_path / 'profile'}",
    ):
        options.add_argument(arg)
    options.add_experimental_option(
        "prefs",
        {
            "download.default_directory": str(downloads),
            "download.prompt_for_download": False,
            "intl.accept_languages": "en-US,en",
        },
    )
    d = webdriver.Chrome(options=options, service=Service(executable_path=driver))
    d.set_page_load_timeout(120)
    d.execute_cdp_cmd(
        "Page.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)}
    )
    try:
        yield d
    finally:
        d.quit()


def _login(d: WebDriver, console: Console, login: str) -> None:
    d.delete_all_cookies()
    d.get(console.url + "/login")
    d.find_element(By.NAME, "login").send_keys(login)
    d.find_element(By.NAME, "password").send_keys(PASSWORD)
    d.find_element(By.CSS_SELECTOR, "form.login button").click()
    wait_until(lambda: "/login" not in d.current_url, timeout=60)


def _shot(d: WebDriver, name: str) -> None:
    where = Path(os.environ.get(SHOTS_ENV) or d.capabilities["chrome"]["userDataDir"])
    where.mkdir(parents=True, exist_ok=True)
    assert d.save_screenshot(str(where / f"{name}.png"))


def test_a_member_works_with_the_console_in_a_real_browser(
    console: Console, browser: WebDriver, tmp_path: Path
) -> None:
    """Log in, search with a filter, open the document, download it (SHA-256 equals the
    archive's), upload a scan and see it arrive; another tenant's URL is 404."""
    d = browser
    _login(d, console, "anna")
    _shot(d, "search")
    box = d.find_element(By.NAME, "q")
    box.send_keys("Scan_0815")
    d.find_element(By.NAME, "source").send_keys("cli")
    d.find_element(By.CSS_SELECTOR, "form.search button").click()
    wait_until(lambda: "q=Scan_0815" in d.current_url, timeout=60)
    link = d.find_element(By.CSS_SELECTOR, "table.hits a")
    assert "Scan_0815.pdf" in d.page_source
    link.click()
    wait_until(lambda: "/d/" in d.current_url, timeout=60)
    assert "Scan_0815.pdf" in d.find_element(By.CSS_SELECTOR, "dl.record").text
    _shot(d, "document")
    d.find_element(By.CSS_SELECTOR, "a.download").click()
    target = tmp_path / "downloads" / "Scan_0815.pdf"
    wait_until(target.exists, timeout=120)
    assert hashlib.sha256(target.read_bytes()).hexdigest() == console.shas["Scan_0815.pdf"]

    scan = write(tmp_path / "Antrag 2026.pdf", pdf_bytes(seed=31))
    d.get(console.url + "/t/acme/")
    d.find_element(By.CSS_SELECTOR, "form.upload input[type=file]").send_keys(str(scan))
    d.find_element(By.CSS_SELECTOR, "form.upload button").click()
    wait_until(lambda: "Uploaded" in d.page_source, timeout=120)
    assert "Antrag 2026.pdf" in d.page_source and "archived" in d.page_source
    _shot(d, "uploaded")
    d.find_element(By.CSS_SELECTOR, "tr.outcome-ingested a").click()
    wait_until(lambda: "Antrag 2026.pdf" in d.page_source and "/d/" in d.current_url, 60)

    d.get(console.url + f"/t/beta/d/{console.docs['Beta_geheim.pdf']}")
    assert "Not found." in d.page_source and "Beta_geheim" not in d.page_source


def test_an_owner_requeues_and_a_readonly_member_has_no_edit_control(
    console: Console, browser: WebDriver
) -> None:
    """bert (beta owner) re-queues a document in attention with its button; rita
    (readonly) sees no edit or upload control, and a forged edit form is refused."""
    d = browser
    doc = console.docs["Beta_geheim.pdf"]
    with console.db.transaction() as tx:
        tx.raw(
            "UPDATE documents SET processing_status = 'attention', "
            "attention_reason = 'encrypted: a password is needed' WHERE id = %(i)s",
            {"i": doc},
        )
        jobs = tx.raw("SELECT count(*) AS n FROM processing_jobs")[0]["n"]
    _login(d, console, "bert")
    d.get(console.url + "/t/beta/attention")
    assert "encrypted: a password is needed" in d.page_source
    _shot(d, "attention")
    d.find_element(By.XPATH, "//button[text()='Analyse again']").click()
    wait_until(lambda: d.current_url.endswith("/t/beta/attention"), timeout=60)

    def queued() -> bool:
        with console.db.transaction() as tx:
            return int(tx.raw("SELECT count(*) AS n FROM processing_jobs")[0]["n"]) == jobs + 1

    wait_until(queued, timeout=60)

    acme_doc = console.docs["Scan_0815.pdf"]
    _login(d, console, "rita")
    d.get(console.url + f"/t/acme/d/{acme_doc}")
    assert not d.find_elements(By.CSS_SELECTOR, "form.edit")
    d.get(console.url + "/t/acme/")
    assert not d.find_elements(By.CSS_SELECTOR, "form.upload")
    # Posting the edit form anyway (as a crafted page would): refused, title unchanged.
    token = d.find_element(By.CSS_SELECTOR, "form.logout input[name=csrf]").get_attribute("value")
    d.execute_script(
        "const f = document.createElement('form'); f.method = 'post';"
        f"f.action = '/t/acme/d/{acme_doc}/edit';"
        "for (const [k, v] of [['csrf', arguments[0]], ['title', 'forged']]) {"
        "  const i = document.createElement('input'); i.name = k; i.value = v;"
        "  f.appendChild(i); }"
        "document.body.appendChild(f); f.submit();",
        token,
    )
    wait_until(lambda: "/edit" in d.current_url, timeout=60)
    assert "does not allow" in d.page_source
    with console.db.transaction() as tx:
        title = tx.raw("SELECT title FROM documents WHERE id = %(i)s", {"i": acme_doc})[0]
    assert title["title"] != "forged"


def test_the_login_page_speaks_the_browser_s_language(console: Console, browser: WebDriver) -> None:
    """The English browser gets English; one that prefers German gets German."""
    browser.get(console.url + "/login")
    assert browser.find_element(By.TAG_NAME, "h1").text == "Log in"
    _shot(browser, "login")
    with httpx.Client(base_url=console.url, timeout=60) as c:
        page = c.get("/login", headers={"accept-language": "de-DE,de;q=0.9,en;q=0.5"})
    assert "<h1>Anmelden</h1>" in page.text
