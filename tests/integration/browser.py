"""The person's browser for the sign-in tests: headless Chromium (Debian's `chromium`), driven by
Selenium through Debian's `chromium-driver`.

    page = sign_in(authorization_url, "alice")                 # logs in, consents
    page = sign_in(authorization_url, "bob", consent=False)    # logs in, declines
    page.url, page.text                                         # where the redirects ended, its text

Selenium with the distribution's chromedriver rather than the DevTools protocol by hand: the
driver and the browser come from one build (no version skew), `get` returns once the page has
loaded, and the waits below (a new document, loaded, before looking at it) replace what a
hand-rolled DevTools client would have to get right from its events.

Every call starts its own browser with a fresh profile directory, removed afterwards: no
cookies (no IdP session) carry from one person to the next.

The pages handled are oidc-provider's development login (`login`, `password`) and consent
(`prompt=consent`, "Continue") pages, and their "[ Cancel ]" link (error=access_denied).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

CHROMIUM = os.environ.get("CEM_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("CEM_CHROMEDRIVER", "/usr/bin/chromedriver")


class SignIn(str):
    """The final URL (this string itself), with `.url`, `.text` (the page's visible text) and
    `.query` (the final URL's query parameters)."""

    url: str
    text: str
    query: dict[str, str]

    def __new__(cls, url: str, text: str):
        import urllib.parse

        self = super().__new__(cls, url)
        self.url = url
        self.text = text
        self.query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(url).query, keep_blank_values=True))
        return self


class BrowserMissing(RuntimeError):
    pass


def _require_chromium() -> None:
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not (Path(p).exists() or shutil.which(p))]
    if missing:
        raise BrowserMissing(
            f"{', '.join(missing)} not found: the sign-in tests need headless Chromium and its driver; "
            "install them with `apt-get install chromium chromium-driver` (scripts/test does), "
            "or point CEM_CHROMIUM / CEM_CHROMEDRIVER at them")
    try:
        import selenium  # noqa: F401
    except ImportError:
        raise BrowserMissing("selenium is not installed in this Python; it is in "
                             "tests/integration/requirements.txt (scripts/test installs it)") from None


def _driver(profile: str, timeout: float):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                f"--user-data-dir={profile}", "--no-first-run", "--no-default-browser-check",
                "--disable-extensions", "--disable-background-networking", "--disable-sync",
                "--disable-component-update", "--disable-features=HttpsUpgrades,HttpsFirstBalancedModeAutoEnable",
                "--password-store=basic", "--window-size=1000,800"):
        options.add_argument(arg)
    options.page_load_strategy = "normal"
    service = Service(executable_path=CHROMEDRIVER, log_output=os.devnull)
    driver = webdriver.Chrome(options=options, service=service)
    driver.set_page_load_timeout(timeout)
    return driver


def _page_text(driver) -> str:
    from selenium.webdriver.common.by import By

    try:
        return driver.find_element(By.TAG_NAME, "body").text
    except Exception:  # a page without a body (a bare text/JSON document is given one by Chromium)
        return driver.page_source


def _state(driver) -> str:
    """Which page this is: "login", "consent" or "other" (where the redirects ended)."""
    from selenium.webdriver.common.by import By

    if driver.find_elements(By.CSS_SELECTOR, "form input[name=login]"):
        return "login"
    if driver.find_elements(By.CSS_SELECTOR, "form input[name=prompt][value=consent]"):
        return "consent"
    return "other"


def sign_in(url: str, login: str, *, consent: bool = True, timeout: float = 30, password: str = "any") -> SignIn:
    """Opens `url` (an authorization request), logs in as `login`, approves (or with consent=False
    declines) the consent, and follows the redirects wherever they go. Gives the final URL (with
    its text); raises TimeoutError if the pages do not settle within `timeout` seconds."""
    _require_chromium()
    from selenium.common.exceptions import TimeoutException, WebDriverException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    deadline = time.monotonic() + timeout
    profile = tempfile.mkdtemp(prefix="cem-browser-")
    driver = None

    def wait(what: str, condition):
        # While a page is being replaced, chromedriver answers with transient errors (stale
        # elements, "node does not belong to the document", no execution context): asked again.
        left = max(deadline - time.monotonic(), 0.1)
        try:
            return WebDriverWait(driver, left, poll_frequency=0.05, ignored_exceptions=(WebDriverException,)).until(
                condition)
        except TimeoutException:
            raise TimeoutError(f"sign-in of {login}: {what} within {timeout} s "
                               f"(at {driver.current_url}: {_page_text(driver)[:500]})") from None

    def settled(mark):
        # A new document has no mark of ours, and it has loaded.
        return lambda d: d.execute_script(
            "return document.readyState === 'complete' && window.__cemPage !== arguments[0]", mark)

    try:
        driver = _driver(profile, timeout)
        driver.get(url)
        # At most a login page and a consent page (twice over, should the IdP ask again).
        for step in range(6):
            state = wait("no page settled", lambda d: _state(d))
            if state == "other":
                return SignIn(driver.current_url, _page_text(driver))
            mark = f"step-{step}"
            driver.execute_script("window.__cemPage = arguments[0]", mark)
            if state == "login":
                field = driver.find_element(By.CSS_SELECTOR, "form input[name=login]")
                field.clear()
                field.send_keys(login)
                for pw in driver.find_elements(By.CSS_SELECTOR, "form input[name=password]"):
                    pw.send_keys(password)
                driver.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()
            elif consent:
                driver.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()
            else:
                driver.find_element(By.CSS_SELECTOR, "a[href*='/abort']").click()
            # The click navigates: wait for the old page to go and the new one to load.
            wait(f"no new page after the {state} page", settled(mark))
        raise RuntimeError(f"sign-in of {login}: still at a login or consent page after 6 of them "
                           f"({driver.current_url}: {_page_text(driver)[:500]})")
    except TimeoutException as err:
        raise TimeoutError(f"sign-in of {login}: {url} did not load within {timeout} s: {err.msg}") from None
    finally:
        if driver is not None:
            driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def give_key(url: str, key: str, *, timeout: float = 30) -> SignIn:
    """Opens `url` (this server's key page), types `key` into its one field and sends the form, as a
    person would. Gives the page it lands on (with its text)."""
    _require_chromium()
    from selenium.common.exceptions import TimeoutException, WebDriverException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    profile = tempfile.mkdtemp(prefix="cem-browser-")
    driver = None
    try:
        driver = _driver(profile, timeout)
        driver.get(url)
        wait = WebDriverWait(driver, timeout, poll_frequency=0.05, ignored_exceptions=(WebDriverException,))
        field = wait.until(lambda d: d.find_element(By.CSS_SELECTOR, "form input[name=key]"))
        field.send_keys(key)
        driver.execute_script("window.__cemPage = 'key-form'")
        driver.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()
        wait.until(lambda d: d.execute_script(
            "return document.readyState === 'complete' && window.__cemPage !== 'key-form'"))
        return SignIn(driver.current_url, _page_text(driver))
    except TimeoutException:
        text = _page_text(driver) if driver is not None else ""
        raise TimeoutError(f"the key page {url} did not answer within {timeout} s: {text[:500]}") from None
    finally:
        if driver is not None:
            driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
