"""The web console (cluster/web/console/) in a real headless browser against the real stack.

Debian's chromium, driven through its chromedriver by selenium (installed with apt-get
when missing, cluster/devstack/browser.py), loads the console from an in-process `delayq web`
app (tests/test_web.py's `serving`) over the test's own cluster, with real nodes that
serve /metrics so the sampler has rates. Selenium's calls block, so they run in a
thread: the server and the nodes share the test's event loop.

What the page shows is checked against what the client reads from MySQL and Redis, and
every change made through the page (cancel, cancel all matching, reschedule, fire now,
replay, purge) is checked there too, after the confirmation dialog was cancelled
(nothing changed) and confirmed.

DELAYQ_WRITE_SCREENSHOTS=1 also writes docs/img/console-*.png (with a longer, busier
load for the charts); normal runs write nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import re
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import aiohttp
import pytest
from selenium import webdriver
from selenium.common.exceptions import (
    ElementClickInterceptedException,
    NoSuchElementException,
    StaleElementReferenceException,
)
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.chrome.webdriver import WebDriver
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import WebDriverWait

from actors.node import Node
from cluster import DelayClient, JobStatus
from cluster.devstack.browser import ensure_chromium
from cluster.devstack.databases import create_cluster_database, drop_cluster_database
from cluster.devstack.nodes import free_port
from cluster.devstack.service import ServicesError
from cluster.model.tick_ids import tick_job_id
from cluster.settings.config import Settings
from tests.conftest import wait_for
from tests.mysql_tools import count_rows
from tests.test_web import OPERATOR, PRODUCER, TOKENS, VIEWER, Api, serving

pytestmark = pytest.mark.skipif(
    os.environ.get("DELAYQ_TEST_REDIS_CLUSTER") == "1"
    or bool(os.environ.get("DELAYQ_TEST_SECURE")),
    reason="the console is tested once per suite run, in the pass against the single Redis",
)

ROOT = Path(__file__).resolve().parent.parent
CONSOLE = ROOT / "cluster" / "web" / "console"
SCREENSHOTS = ROOT / "docs" / "img"
WRITE_SCREENSHOTS = os.environ.get("DELAYQ_WRITE_SCREENSHOTS") == "1"
WAIT_S = 60.0
VIEWPORT = (1280, 800)

T = TypeVar("T")


# ----- the browser --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def driver() -> Iterator[WebDriver]:
    """One headless chromium for the module (each test's server is a new origin, so no
    token or state carries over)."""
    try:
        chromium, chromedriver = ensure_chromium()
    except ServicesError as exc:
        pytest.skip(f"no chromium to drive: {exc}")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in (
        "--headless=new",
        "--no-sandbox",  # as root, in a container
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--no-first-run",
        f"--window-size={VIEWPORT[0]},{VIEWPORT[1]}",
    ):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    browser = webdriver.Chrome(service=Service(chromedriver), options=options)
    # The page's own size, whatever the window's decorations take.
    browser.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": VIEWPORT[0], "height": VIEWPORT[1], "deviceScaleFactor": 1, "mobile": False},
    )
    try:
        yield browser
    finally:
        browser.quit()


class Page:
    """The console in the browser, with async helpers that run selenium in a thread."""

    def __init__(self, driver: WebDriver, base: str) -> None:
        self.driver = driver
        self.base = base

    async def run(self, fn: Callable[[], T]) -> T:
        return await asyncio.to_thread(fn)

    async def open(self, fragment: str = "") -> None:
        await self.run(lambda: self.driver.get(f"{self.base}/{fragment}"))
        await self.find("body[data-ready='true']")

    async def until(
        self,
        condition: Callable[[WebDriver], T | None],
        what: str,
        also_ignoring: tuple[type[Exception], ...] = (),
    ) -> T:
        """Wait (up to WAIT_S) until condition returns something other than None or False;
        returns it. Each try runs whole in the thread, so an element it finds is used before the
        page can replace it (a re-rendered table); a try whose element went stale or is
        not there yet is tried again."""
        wait = WebDriverWait(
            self.driver,
            WAIT_S,
            poll_frequency=0.1,
            ignored_exceptions=(
                NoSuchElementException,
                StaleElementReferenceException,
                *also_ignoring,
            ),
        )

        def check(driver: WebDriver) -> tuple[T] | bool:
            result = condition(driver)
            return False if result is None or result is False else (result,)

        found = await self.run(lambda: wait.until(check, message=f"waiting for {what}"))
        assert isinstance(found, tuple)
        result: T = found[0]
        return result

    async def find(self, css: str) -> WebElement:
        return await self.until(
            lambda d: d.find_element(By.CSS_SELECTOR, css), f"an element {css!r}"
        )

    async def all(self, css: str) -> list[WebElement]:
        return await self.run(lambda: self.driver.find_elements(By.CSS_SELECTOR, css))

    async def attributes(self, css: str, name: str) -> list[str]:
        """An attribute (or property, such as textContent) of every element css finds."""

        def read(d: WebDriver) -> list[str]:
            elements = d.find_elements(By.CSS_SELECTOR, css)
            return [element.get_attribute(name) or "" for element in elements]

        return await self.until(read, f"the {name} of {css!r}")

    async def text(self, css: str) -> str:
        """An element's text content (also of a hidden element)."""
        return await self.until(
            lambda d: d.find_element(By.CSS_SELECTOR, css).get_attribute("textContent") or "",
            f"the text of {css!r}",
        )

    async def shown(self, css: str) -> bool:
        [shown] = await self.until(
            lambda d: [d.find_element(By.CSS_SELECTOR, css).is_displayed()], f"{css!r}"
        )
        return shown

    async def enabled(self, css: str) -> bool:
        [enabled] = await self.until(
            lambda d: [d.find_element(By.CSS_SELECTOR, css).is_enabled()], f"{css!r}"
        )
        return enabled

    async def until_text(self, css: str, wanted: str | re.Pattern[str]) -> str:
        """Wait until the text of css contains `wanted` (or matches it); returns the text."""

        def check(d: WebDriver) -> str | None:
            text = d.find_element(By.CSS_SELECTOR, css).get_attribute("textContent") or ""
            found = wanted.search(text) if isinstance(wanted, re.Pattern) else wanted in text
            return text if found else None

        return await self.until(check, f"{css!r} to show {wanted!r}")

    async def click(self, css: str) -> None:
        """Click the element once it is shown and enabled (and nothing covers it)."""

        def press(d: WebDriver) -> bool | None:
            element = d.find_element(By.CSS_SELECTOR, css)
            if not (element.is_displayed() and element.is_enabled()):
                return None
            element.click()
            return True

        await self.until(press, f"{css!r} to click", (ElementClickInterceptedException,))

    async def fill(self, css: str, text: str) -> None:
        def type_in(d: WebDriver) -> bool | None:
            element = d.find_element(By.CSS_SELECTOR, css)
            if not element.is_displayed():
                return None
            element.clear()
            element.send_keys(text)
            return True

        await self.until(type_in, f"{css!r} to type in")

    async def script(self, source: str, *args: object) -> Any:
        return await self.run(lambda: self.driver.execute_script(source, *args))

    async def dialog(self, dialog_id: str, is_open: bool) -> None:
        def check(d: WebDriver) -> bool:
            element = d.find_element(By.ID, dialog_id)
            return (element.get_attribute("open") is not None) == is_open

        await self.until(check, f"#{dialog_id} to be {'open' if is_open else 'closed'}")

    async def screenshot(self, name: str) -> None:
        """docs/img/console-<name>.png, when DELAYQ_WRITE_SCREENSHOTS=1."""
        if WRITE_SCREENSHOTS:
            path = SCREENSHOTS / f"console-{name}.png"
            await self.script("document.activeElement && document.activeElement.blur()")
            assert await self.run(lambda: self.driver.save_screenshot(str(path)))

    def log(self) -> list[dict[str, Any]]:
        """The browser's console entries since the last call (chromedriver's log)."""
        entries: list[dict[str, Any]] = self.driver.get_log("browser")  # type: ignore[no-untyped-call]
        return entries

    async def errors(self) -> list[dict[str, Any]]:
        """The page's console errors since the last call: scripts that threw and CSP
        violations. Failed loads (the API's 401, 403 and 404 answers) are not errors."""
        entries = await self.run(self.log)
        return [e for e in entries if e["level"] == "SEVERE" and e.get("source") != "network"]


@contextlib.asynccontextmanager
async def console(
    driver: WebDriver, settings: Settings, client: DelayClient
) -> AsyncIterator[tuple[Page, Api]]:
    """The console's server over the test's settings, and the browser pointed at it."""
    async with serving(settings, client) as api:
        page = Page(driver, api.base)
        await page.run(page.log)  # forget earlier pages' entries
        yield page, api
        assert await page.errors() == []


# ----- the cluster ---------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def running_node(settings: Settings, node_id: str, **changes: Any) -> AsyncIterator[Node]:
    """A node of the test's cluster serving /metrics on a port of its own."""
    node = Node(settings.replace(node_id=node_id, metrics_port=free_port(), **changes))
    await node.start()
    try:
        yield node
    finally:
        await node.stop()


def wave(seconds: float, mean_per_s: float) -> list[float]:
    """Due times (epoch seconds) from 1 s ahead for `seconds`, at a rate that rises and
    falls around mean_per_s, so the charts have a shape."""
    start = time.time() + 1.0
    due: list[float] = []
    for second in range(math.ceil(seconds)):
        per_s = int(mean_per_s * (1 + 0.6 * math.sin(second / 6)))
        due += [start + second + i / per_s for i in range(per_s)]
    return due


async def make_dead(client: DelayClient, count: int) -> tuple[list[str], str]:
    """`count` jobs of a topic the node refuses to publish (allowed_topics), dead after
    their only attempt, with the death recorded in MySQL. Returns the ids and topic."""
    topic = f"refused.{uuid.uuid4().hex[:8]}"
    ids = await client.schedule_many(
        [{"topic": topic, "payload": {"n": n}, "delay": 0, "max_attempts": 1} for n in range(count)]
    )

    async def dead_everywhere() -> bool:
        rows = await client.mysql.get_many(ids)
        recorded = all(rows[i].status == JobStatus.DEAD for i in ids if i in rows)
        return len(rows) == count and recorded and await client.count_dead(topic=topic) == count

    assert await wait_for(dead_everywhere, timeout_s=WAIT_S)
    return ids, topic


async def history(client: DelayClient, job_id: str) -> list[tuple[int, str | None]]:
    return [(row["status"], row["note"]) for row in await client.mysql.history(job_id)]


# ----- the page's files ------------------------------------------------------------------------


def test_console_files_hold_no_inline_code_markup_sinks_or_remote_urls() -> None:
    """The CSP allows only the console's own files: no inline script or style, nothing
    from another origin; and data reaches the page as text, never as markup."""
    html = (CONSOLE / "index.html").read_text()
    assert not re.search(r"<script(?![^>]*\bsrc=)", html), "inline script"
    assert not re.search(r"<style|\sstyle=|\son[a-z]+=", html), "inline style or handler"
    for path in sorted(CONSOLE.iterdir()):
        text = path.read_text()
        urls = re.findall(r"https?://[^\s\"')]+", text)
        assert urls in ([], ["http://www.w3.org/2000/svg"]), f"{path.name}: {urls}"
        if path.suffix == ".js":
            code = re.sub(r"(?m)^\s*(//|/?\*).*$", "", text)  # without whole-line comments
            for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
                assert sink not in code, f"{path.name} uses {sink}"
            for module in re.findall(r"from \"(\./[^\"]+)\"", text):
                assert (CONSOLE / module).is_file(), f"{path.name} imports {module}"
    for reference in re.findall(r"(?:src|href)=\"(/console/[^\"]+)\"", html):
        assert (CONSOLE / reference.removeprefix("/console/")).is_file(), reference


async def test_console_is_served_with_its_files_and_the_csp(
    settings: Settings, client: DelayClient
) -> None:
    async with serving(settings, client) as api, aiohttp.ClientSession() as http:
        async with http.get(f"{api.base}/") as answer:
            assert answer.status == 200 and answer.content_type == "text/html"
            assert "default-src 'self'" in answer.headers["Content-Security-Policy"]
            page = await answer.text()
        for reference in re.findall(r"(?:src|href)=\"(/console/[^\"]+)\"", page):
            async with http.get(f"{api.base}{reference}") as answer:
                assert answer.status == 200, reference
        for module in sorted(CONSOLE.glob("*.js")):
            async with http.get(f"{api.base}/console/{module.name}") as answer:
                # A module script must come with a JavaScript type (nosniff is set).
                assert answer.content_type in ("text/javascript", "application/javascript")


def number(text: str) -> float | None:
    """A figure as the console shows it ("1,204", "3.5"), or None for "–"."""
    cleaned = text.replace(",", "").strip()
    return float(cleaned) if re.fullmatch(r"\d+(\.\d+)?", cleaned) else None


async def test_cluster_view_shows_members_slot_map_charts_and_topics(
    driver: WebDriver, settings: Settings, client: DelayClient, topic: str
) -> None:
    async with (
        running_node(settings, "node-a", allowed_topics=topic) as a,
        running_node(settings, "node-b", allowed_topics=topic) as b,
        console(driver, settings, client) as (page, _),
    ):
        nodes = {a.settings.node_id, b.settings.node_id}
        await page.open()

        def members(d: WebDriver) -> bool:
            shown = d.find_elements(By.CSS_SELECTOR, "[data-testid=member-node]")
            return {element.text for element in shown} == nodes

        await page.until(members, "both members")
        assert len(await page.all("[data-testid=slot-cell]")) == settings.slots

        def owners(d: WebDriver) -> bool:
            cells = d.find_elements(By.CSS_SELECTOR, "[data-testid=slot-cell]")
            return {cell.get_attribute("data-owner-node") for cell in cells} == nodes

        await page.until(owners, "every slot owned by one of the two nodes")
        # Load: a wave of jobs due from now on, 25 due later, 2 that go dead.
        seconds, mean = (75, 300) if WRITE_SCREENSHOTS else (8, 250)
        jobs = [
            {"topic": topic, "payload": {"n": n}, "at": at}
            for n, at in enumerate(wave(seconds, mean))
        ]
        for start in range(0, len(jobs), 10_000):
            await client.schedule_many(jobs[start : start + 10_000])
        later = [{"topic": topic, "payload": n, "delay": 240} for n in range(25)]
        await client.schedule_many(later)
        await make_dead(client, 2)

        def firing(d: WebDriver) -> bool:
            rate = number(d.find_element(By.CSS_SELECTOR, "[data-testid=fire-rate]").text)
            return rate is not None and rate > 0

        await page.until(firing, "a fire rate (two scrapes of a node while it fires)")
        await page.find("#chart-rate path.series")
        await page.find("#chart-lateness path.series")
        await page.until_text("[data-testid=topics]", topic)
        await page.until_text("[data-testid=total-dead]", re.compile(r"^2$"))
        if WRITE_SCREENSHOTS:

            def a_minute(d: WebDriver) -> bool:
                points = d.find_element(By.ID, "chart-rate").get_attribute("data-points")
                return int(points or 0) >= 30

            await page.until(a_minute, "a minute of figures")
            await page.screenshot("cluster")
        # When all but the 25 have fired, the delay total is theirs.
        await page.until_text("[data-testid=total-delay]", re.compile(r"^25$"))
        # A slot's owner and depths.
        await page.click("[data-testid=slot-cell][data-slot='3']")
        fields = await page.until_text("[data-testid=slot-fields]", "owner node")
        assert any(node in fields for node in nodes)


@contextlib.asynccontextmanager
async def cluster_of(redis_settings: Settings, slots: int) -> AsyncIterator[Settings]:
    """The test's settings for a cluster of `slots` slots, with its own database (the
    slot count is fixed when a cluster's database is made)."""
    settings = await create_cluster_database(
        redis_settings.replace(slots=slots), f"delayq_{redis_settings.key_prefix}"
    )
    try:
        yield settings
    finally:
        await drop_cluster_database(settings)


async def test_cluster_view_before_the_first_node_and_a_compact_slot_map(
    driver: WebDriver, redis_settings: Settings
) -> None:
    """Without a node there is no cluster yet: the view says why, and shows the cluster
    by itself once a node joins; 256 slots are small cells, each with its figures in
    its label and beside the map when selected."""
    async with (
        cluster_of(redis_settings, 256) as settings,
        DelayClient(settings) as client,
        console(driver, settings, client) as (page, _),
    ):
        await page.open()
        await page.until_text("[data-testid=cluster-message]", "no node has joined yet")
        async with running_node(settings, "node-a"):
            await page.until_text("[data-testid=members]", "node-a")

            def owned(d: WebDriver) -> bool:
                cells = d.find_elements(By.CSS_SELECTOR, "[data-testid=slot-cell]")
                return len(cells) == 256 and all(
                    cell.get_attribute("data-owner-node") == "node-a" for cell in cells
                )

            await page.until(owned, "256 slots owned by node-a")
            assert "compact" in (await page.attributes("#slot-map", "class"))[0]
            await page.until_text("[data-testid=slots-owned]", "256")
            cell = "[data-testid=slot-cell][data-slot='200']"
            label = (await page.attributes(cell, "aria-label"))[0]
            assert label.startswith("slot 200, owner node-a, 0 delayed")
            await page.click(cell)
            await page.until_text("[data-testid=slot-detail]", "Slot 200")
            assert not await page.shown("[data-testid=cluster-message]")


async def test_job_lookup_shows_fields_payload_history_and_cancels_after_confirming(
    driver: WebDriver, settings: Settings, client: DelayClient
) -> None:
    # Ids and payloads are user data: markup in them must show as text.
    job_id = 'order/42 <img src=x> ?a=1#"frag" %2F'
    payload = {"order": 42, "note": "<b>bold</b><script>alert(1)</script>", "items": [1, 2]}
    await client.schedule(
        "orders.close", payload, delay=3600, job_id=job_id, biz_id="order-42", biz_type="close"
    )
    await client.reschedule(job_id, delay=1800)
    await client.reschedule(job_id, delay=900)
    async with console(driver, settings, client) as (page, _):
        await page.open("#jobs")
        await page.fill("#job-id", job_id)
        await page.click("[data-testid=job-lookup]")
        await page.until_text("[data-testid=job-title]", job_id)
        assert await page.text("[data-testid=job-status]") == "pending"
        assert await page.text("[data-testid=job-topic]") == "orders.close"
        assert await page.text("[data-testid=job-payload]") == json.dumps(payload, indent=2)
        assert await page.all("#job-payload *") == []
        assert await page.all("img") == [] and await page.all("main b") == []
        notes = await page.attributes("[data-testid=history-row]", "textContent")
        assert len(notes) == 3 and "created" in notes[0]
        assert all("rescheduled" in note for note in notes[1:])
        # The address names the job, so it can be linked to.
        address = await page.script("return location.hash")
        assert await page.script("return decodeURIComponent(arguments[0])", address[6:]) == job_id
        await page.screenshot("job")

        # Cancel: backing out of the dialog changes nothing.
        await page.click("[data-testid=job-cancel]")
        await page.dialog("confirm-dialog", True)
        assert job_id in await page.text("[data-testid=confirm-ids]")
        await page.click("[data-testid=confirm-cancel]")
        await page.dialog("confirm-dialog", False)
        record = await client.get(job_id)
        assert record is not None and record.status == JobStatus.PENDING
        # Confirmed, it is cancelled.
        await page.click("[data-testid=job-cancel]")
        await page.dialog("confirm-dialog", True)
        await page.click("[data-testid=confirm-ok]")
        await page.until_text("[data-testid=job-message]", "Cancelled")
        record = await client.get(job_id)
        assert record is not None and record.status == JobStatus.CANCELLED
        await page.until_text("[data-testid=job-status]", "cancelled")
        assert not await page.enabled("#job-cancel")

        # A tick of a recurring schedule says which schedule, and the tick's time.
        schedule = await client.schedule_recurring("console-tick", "orders.tick", 1, every=10)
        assert schedule.last_tick_ms is not None  # within the lookahead: a job already
        tick = tick_job_id("console-tick", 1, schedule.last_tick_ms)
        await page.open(f"#jobs/{quote(tick, safe='')}")
        await page.until_text("[data-testid=job-title]", tick)
        assert await page.text("[data-testid=job-recurring]") == "console-tick"

        # An unknown id: no job has it, nor as its biz_id, and the page says what it searched.
        await page.open("#jobs/nobody%2Fhere")
        await page.until_text("[data-testid=job-message]", "No job has the id 'nobody/here'")
        assert not await page.shown("#job-result")
        await page.until_text("[data-testid=search-count]", "biz_id nobody/here")
        await page.until_text("[data-testid=search-list]", "no job matches")


async def test_dead_letters_replay_and_purge_only_after_confirming(
    driver: WebDriver, settings: Settings, client: DelayClient, topic: str
) -> None:
    async with running_node(settings, "node-a", allowed_topics=topic):
        ids, refused = await make_dead(client, 3)
        async with console(driver, settings, client) as (page, _):
            await page.open("#dead-letters")
            await page.until_text("[data-testid=dead-count]", "3 dead")
            listed = await page.attributes("[data-testid=dead-row]", "data-job-id")
            assert sorted(listed) == sorted(ids)
            first, second, third = ids
            row = f"[data-testid=dead-row][data-job-id='{first}']"
            # One dead job, with the record it would fire and its history.
            await page.click(f"{row} [data-testid=dead-show]")
            await page.until_text("[data-testid=dead-title]", first)
            assert json.loads(await page.text("[data-testid=dead-record]"))["job_id"] == first
            await page.until_text("#dead-history", "TopicNotAllowed")

            # Replay: the dialog names the job; backing out changes nothing.
            before = await history(client, first)
            await page.click(f"{row} [data-testid=dead-replay]")
            await page.dialog("confirm-dialog", True)
            assert await page.text("[data-testid=confirm-ids]") == first
            assert "new set of attempts" in await page.text("[data-testid=confirm-text]")
            await page.screenshot("dead-letters")
            await page.click("[data-testid=confirm-cancel]")
            await page.dialog("confirm-dialog", False)
            assert await client.dead_job(first) is not None
            assert await history(client, first) == before
            assert await client.count_dead(topic=refused) == 3
            # Confirmed: replayed (and, its topic still refused, dead again after it).
            await page.click(f"{row} [data-testid=dead-replay]")
            await page.dialog("confirm-dialog", True)
            await page.click("[data-testid=confirm-ok]")
            await page.until_text("[data-testid=dead-message]", "Replayed 1 dead job.")

            async def replayed() -> bool:
                statuses = [status for status, _ in await history(client, first)]
                return statuses[len(before) :][:1] == [JobStatus.PENDING]

            assert await wait_for(replayed, timeout_s=WAIT_S)

            # Purge one: Escape backs out, "Purge" forgets it in Redis (MySQL keeps it).
            purge = f"[data-testid=dead-row][data-job-id='{second}'] [data-testid=dead-purge]"
            await page.click(purge)
            await page.dialog("confirm-dialog", True)
            await page.run(lambda: driver.switch_to.active_element.send_keys(Keys.ESCAPE))
            await page.dialog("confirm-dialog", False)
            assert await client.dead_job(second) is not None
            await page.click(purge)
            await page.dialog("confirm-dialog", True)
            assert "Purge 1 dead job" in await page.text("#confirm-ok")
            await page.click("[data-testid=confirm-ok]")
            await page.until_text("[data-testid=dead-message]", "Purged 1 dead job.")
            assert await client.dead_job(second) is None
            record = await client.get(second)
            assert record is not None and record.status == JobStatus.DEAD
            assert await page.all(f"[data-testid=dead-row][data-job-id='{second}']") == []

            # Everything of the topic: the dialog says which topic.
            async def dead_again() -> bool:
                return await client.dead_job(first) is not None

            assert await wait_for(dead_again, timeout_s=WAIT_S)
            await page.fill("#dead-topic", refused)
            await page.click("[data-testid=dead-load]")
            await page.until_text("[data-testid=dead-count]", f"2 dead in topic {refused}")
            # Ticked jobs: the dialog lists them (backed out of here).
            await page.click("#dead-select-all")
            await page.until_text("[data-testid=dead-purge-selected]", "Purge 2 selected")
            await page.click("[data-testid=dead-purge-selected]")
            await page.dialog("confirm-dialog", True)
            listed = await page.attributes("[data-testid=confirm-ids] li", "textContent")
            assert sorted(listed) == sorted([first, third])
            await page.click("[data-testid=confirm-cancel]")
            await page.dialog("confirm-dialog", False)
            assert await client.count_dead(topic=refused) == 2
            await page.click("[data-testid=dead-purge-all]")
            await page.dialog("confirm-dialog", True)
            assert refused in await page.text("#confirm-title")
            await page.click("[data-testid=confirm-ok]")
            await page.until_text("[data-testid=dead-message]", "Purged 2 dead jobs.")
            assert await client.count_dead() == 0
            await page.until_text("[data-testid=dead-count]", "0 dead")
            assert third not in await page.text("[data-testid=dead-list]")

            # A purged job, dead in MySQL, is replayed from the job's own view.
            before = await history(client, second)
            await page.open(f"#jobs/{second}")
            await page.until_text("[data-testid=job-status]", "dead")
            await page.click("[data-testid=job-replay]")
            await page.dialog("confirm-dialog", True)
            await page.click("[data-testid=confirm-ok]")
            await page.until_text("[data-testid=job-message]", "Replayed")

            async def replayed_from_mysql() -> bool:
                statuses = [status for status, _ in await history(client, second)]
                return statuses[len(before) :][:1] == [JobStatus.PENDING]

            assert await wait_for(replayed_from_mysql, timeout_s=WAIT_S)


async def test_recurring_schedules_are_listed_shown_and_removed_after_confirming(
    driver: WebDriver, settings: Settings, client: DelayClient
) -> None:
    await client.schedule_recurring(
        "morning-report",
        "reports",
        {"report": "<b>sales</b>"},
        cron="0 9 * * 1-5",
        tz="Europe/Berlin",
        missed="skip",
        expires_after=600,
    )
    # Every 10 s: within the lookahead, so its first ticks are jobs already.
    beat = await client.schedule_recurring("heartbeat", "heartbeats", {"svc": "billing"}, every=10)
    assert beat.last_tick_ms is not None
    await client.schedule_recurring("gone", "pings", 1, every=60)
    assert await client.remove_recurring("gone")
    async with console(driver, settings, client) as (page, _):
        await page.open("#recurring")
        await page.until_text("[data-testid=recurring-count]", "2 schedules")
        listed = await page.attributes("[data-testid=recurring-row]", "data-name")
        assert listed == ["heartbeat", "morning-report"]
        await page.click("#recurring-removed")
        await page.until_text("[data-testid=recurring-count]", "2 schedules, 1 removed")
        listed = await page.attributes("[data-testid=recurring-row]", "data-name")
        assert listed == ["gone", "heartbeat", "morning-report"]

        # One schedule beside the list: its definition, and its payload as text.
        await page.click(
            "[data-testid=recurring-row][data-name='morning-report'] [data-testid=recurring-show]"
        )
        await page.until_text("[data-testid=recurring-title]", "morning-report")
        cadence = await page.text("[data-testid=recurring-cadence]")
        assert cadence == "cron 0 9 * * 1-5 (Europe/Berlin)"
        payload = await page.text("[data-testid=recurring-payload]")
        assert json.loads(payload) == {"report": "<b>sales</b>"}
        assert await page.all("main b") == []
        fields = await page.text("[data-testid=recurring-fields]")
        assert "expires after10 min 0 s" in fields and "missed ticksskip" in fields
        await page.screenshot("recurring")

        # The last tick made into a job opens in the job view.
        await page.open("#recurring/heartbeat")
        await page.until_text("[data-testid=recurring-title]", "heartbeat")
        shown = await client.get_recurring("heartbeat")
        assert shown is not None and shown.last_tick_ms is not None
        await page.click("[data-testid=recurring-last-tick]")
        tick = tick_job_id("heartbeat", 1, shown.last_tick_ms)
        await page.until_text("[data-testid=job-title]", tick)
        assert await page.text("[data-testid=job-recurring]") == "heartbeat"

        # Remove: backing out changes nothing; confirmed, the schedule is removed.
        await page.open("#recurring/heartbeat")
        await page.until_text("[data-testid=recurring-title]", "heartbeat")
        await page.click("[data-testid=recurring-remove]")
        await page.dialog("confirm-dialog", True)
        assert await page.text("[data-testid=confirm-ids]") == "heartbeat"
        assert "no more ticks to heartbeats" in await page.text("[data-testid=confirm-text]")
        await page.click("[data-testid=confirm-cancel]")
        await page.dialog("confirm-dialog", False)
        kept = await client.get_recurring("heartbeat")
        assert kept is not None and not kept.removed
        await page.click("[data-testid=recurring-remove]")
        await page.dialog("confirm-dialog", True)
        await page.click("[data-testid=confirm-ok]")
        await page.until_text("[data-testid=recurring-message]", "Removed heartbeat")
        removed = await client.get_recurring("heartbeat")
        assert removed is not None and removed.removed
        await page.until_text("[data-testid=recurring-count]", "1 schedule, 2 removed")
        assert not await page.shown("#recurring-detail")

        # A name nobody used.
        await page.open("#recurring/nobody")
        await page.until_text("[data-testid=recurring-message]", "No recurring schedule nobody")


async def test_a_schedule_is_paused_resumed_and_run_now_with_its_ticks_listed(
    driver: WebDriver, settings: Settings, client: DelayClient
) -> None:
    # Every 10 s: its first ticks are jobs when the call returns (no node needed).
    await client.schedule_recurring("pulse", "pulses", {"p": 1}, every=10)
    async with console(driver, settings, client) as (page, _):
        await page.open("#recurring/pulse")
        await page.until_text("[data-testid=recurring-title]", "pulse")
        await page.until_text("[data-testid=recurring-tick-status]", "pending")
        assert await page.all("[data-testid=recurring-paused]") == []

        # Pause after confirming: the badge shows, the waiting ticks are cancelled.
        await page.until_text("[data-testid=recurring-pause]", "Pause…")
        await page.click("[data-testid=recurring-pause]")
        await page.dialog("confirm-dialog", True)
        await page.click("[data-testid=confirm-ok]")
        await page.until_text("[data-testid=recurring-message]", "Paused pulse")
        await page.until_text("[data-testid=recurring-paused]", "paused")
        await page.until_text("[data-testid=recurring-status]", "paused since")
        await page.until_text("[data-testid=recurring-tick-status]", "cancelled")
        paused = await client.get_recurring("pulse")
        assert paused is not None and paused.paused_ms is not None

        # Resume: the badge goes, and the schedule ticks again (a new generation).
        await page.until_text("[data-testid=recurring-pause]", "Resume…")
        await page.click("[data-testid=recurring-pause]")
        await page.dialog("confirm-dialog", True)
        await page.click("[data-testid=confirm-ok]")
        await page.until_text("[data-testid=recurring-message]", "Resumed pulse")
        await page.until(
            lambda d: not d.find_elements(By.CSS_SELECTOR, "[data-testid=recurring-paused]"),
            "the paused badge to go",
        )
        resumed = await client.get_recurring("pulse")
        assert resumed is not None and resumed.paused_ms is None and resumed.generation == 2

        # Run now: backing out changes nothing; confirmed, the extra job is among the
        # ticks, in due-time order (after the ticks made ahead, due later).
        before = await client.recurring_ticks("pulse", 1000)
        assert before is not None
        await page.click("[data-testid=recurring-run]")
        await page.dialog("confirm-dialog", True)
        await page.click("[data-testid=confirm-cancel]")
        await page.dialog("confirm-dialog", False)
        unchanged = await client.recurring_ticks("pulse", 1000)
        assert unchanged is not None and len(unchanged[0]) == len(before[0])
        await page.click("[data-testid=recurring-run]")
        await page.dialog("confirm-dialog", True)
        await page.click("[data-testid=confirm-ok]")
        await page.until_text("[data-testid=recurring-message]", "Ran pulse now")
        after = await client.recurring_ticks("pulse", 1000)
        assert after is not None and len(after[0]) == len(before[0]) + 1
        [extra] = {j.job_id for j in after[0]} - {j.job_id for j in before[0]}
        assert extra.endswith("r")

        def listed(d: WebDriver) -> bool:
            rows = d.find_elements(By.CSS_SELECTOR, "[data-testid=recurring-tick]")
            return extra in [row.get_attribute("data-id") for row in rows]

        await page.until(listed, "the run-now job among the ticks")


async def test_token_protected_server_asks_for_a_token_and_shows_403(
    driver: WebDriver, settings: Settings, topic: str
) -> None:
    settings = settings.replace(web_tokens=TOKENS)
    async with (
        running_node(settings, "node-a", allowed_topics=topic),
        DelayClient(settings) as client,
    ):
        [dead], _ = await make_dead(client, 1)
        async with console(driver, settings, client) as (page, _):
            await page.open()
            # No token: the page asks, saying why.
            await page.dialog("token-dialog", True)
            await page.until_text("[data-testid=token-reason]", "Bearer")
            # An unknown one: asked again.
            await page.fill("#token-input", "not-a-known-token-at-all")
            await page.click("[data-testid=token-save]")
            await page.dialog("token-dialog", True)
            # The producer's role may not read the cluster: 403 said so.
            await page.fill("#token-input", PRODUCER)
            await page.click("[data-testid=token-save]")
            await page.dialog("token-dialog", False)
            message = await page.until_text("[data-testid=cluster-message]", "403")
            assert "the role producer may not cluster:read" in message
            # A viewer reads the cluster; the token stays for this tab.
            await page.click("[data-testid=token-button]")
            await page.dialog("token-dialog", True)
            await page.fill("#token-input", VIEWER)
            await page.click("[data-testid=token-save]")
            await page.until_text("[data-testid=members]", "node-a")
            assert await page.text("[data-testid=token-button]") == "Token: set"
            assert await page.script("return sessionStorage.getItem('delayq.token')") == VIEWER
            await page.open("#dead-letters")
            await page.until_text("[data-testid=dead-count]", "1 dead")
            await page.dialog("token-dialog", False)
            # ... but may not replay: the dialog, then the 403, and the job stays dead.
            await page.click("[data-testid=dead-replay]")
            await page.dialog("confirm-dialog", True)
            await page.click("[data-testid=confirm-ok]")
            message = await page.until_text("[data-testid=dead-message]", "403")
            assert "the role viewer may not dead:write" in message
            assert await client.dead_job(dead) is not None
            # An operator may.
            await page.click("[data-testid=token-button]")
            await page.fill("#token-input", OPERATOR)
            await page.click("[data-testid=token-save]")
            await page.dialog("token-dialog", False)
            await page.click("[data-testid=dead-replay]")
            await page.dialog("confirm-dialog", True)
            await page.click("[data-testid=confirm-ok]")
            await page.until_text("[data-testid=dead-message]", "Replayed 1 dead job.")
            # Forgetting the token.
            await page.click("[data-testid=token-button]")
            await page.dialog("token-dialog", True)
            await page.click("[data-testid=token-forget]")
            await page.until_text("[data-testid=token-button]", "Token: none")
            assert await page.script("return sessionStorage.getItem('delayq.token')") is None


# ----- browsing and searching jobs, actions, honest counts, expired jobs -------------------------


HOUR_MS = 3_600_000


async def pending_in_mysql(
    client: DelayClient, horizon_ms: int, topic: str | None = None
) -> tuple[int, int]:
    """Pending jobs (pending or retrying) due within the horizon and beyond it, by a
    COUNT(*) over every shard."""
    waiting = f"status IN ({int(JobStatus.PENDING)}, {int(JobStatus.FIRING)})"
    if topic is not None:
        waiting += f" AND topic = '{topic}'"  # a test topic: letters, digits and dots
    edge_ms = int(time.time() * 1000) + horizon_ms
    edge = f"FROM_UNIXTIME({edge_ms // 1000}.{edge_ms % 1000:03d})"  # as the store writes it
    near = await count_rows(client.mysql, f"{waiting} AND action_time <= {edge}")
    beyond = await count_rows(client.mysql, f"{waiting} AND action_time > {edge}")
    return near, beyond


async def search_pages(page: Page) -> list[list[str]]:
    """The ids of every page of the search on screen, from its first page on, by
    "Next page" until it is disabled."""
    pages: list[list[str]] = []
    while True:
        await page.until_text("[data-testid=search-count]", f": page {len(pages) + 1},")
        pages.append(await page.attributes("[data-testid=search-row]", "data-job-id"))
        if not await page.enabled("[data-testid=search-next]"):
            return pages
        await page.click("[data-testid=search-next]")


async def test_jobs_are_searched_paged_rescheduled_fired_now_and_counted_as_mysql_has_them(
    driver: WebDriver, settings: Settings, topic: str
) -> None:
    """The search by biz_id (typed in the lookup box) and by topic and status over jobs in
    Redis and beyond the horizon, paged 10 at a time; a reschedule and a fire now from
    the list; the pending counts as MySQL has them; and an expired job in its view."""
    settings = settings.replace(redis_horizon_ms=HOUR_MS)  # near: 30 min, far: 5 h
    customer = f"cust-{uuid.uuid4().hex[:6]}"
    other = f"other.{uuid.uuid4().hex[:8]}"
    async with (
        DelayClient(settings) as client,
        running_node(settings, "node-a") as _,
    ):
        near = [
            {
                "topic": topic,
                "payload": {"n": n},
                "delay": 1800 + n,
                "biz_id": customer if n < 3 else None,
            }
            for n in range(12)
        ]
        far = [
            {
                "topic": topic,
                "payload": {"n": n},
                "delay": 5 * 3600 + n,
                "biz_id": customer if n < 2 else None,
            }
            for n in range(13)
        ]
        near_ids = await client.schedule_many(near)
        far_ids = await client.schedule_many(far)
        [elsewhere] = await client.schedule_many(
            [{"topic": other, "payload": 1, "delay": 6 * 3600, "biz_id": customer}]
        )
        business = {*near_ids[:3], *far_ids[:2], elsewhere}
        # Past its due time plus expires_after: the node records it expired.
        expiring = await client.schedule(other, 2, delay=3600, expires_after=1)
        assert await client.reschedule(expiring, at=time.time() - 120)

        async def expired() -> bool:
            record = await client.get(expiring)
            return record is not None and record.status == JobStatus.EXPIRED

        assert await wait_for(expired, timeout_s=WAIT_S)

        async with console(driver, settings, client) as (page, _):
            # A biz_id in the lookup box: no job has it as its id, so its jobs are listed.
            await page.open("#jobs")
            await page.fill("#job-id", customer)
            await page.click("[data-testid=job-lookup]")
            await page.until_text("[data-testid=job-message]", f"No job has the id '{customer}'")
            await page.until_text("[data-testid=search-count]", f"biz_id {customer}")
            listed = await page.attributes("[data-testid=search-row]", "data-job-id")
            assert set(listed) == business and len(listed) == len(business)

            # Topic and status pending, 10 a page, soonest first: every job, once.
            await page.fill("#search-biz-id", "")
            await page.fill("#search-topic", topic)
            await page.script("document.getElementById('search-limit').value = '10'")
            await page.click("[data-testid=search-run]")
            pages = await search_pages(page)
            assert len(pages) >= 3 and all(len(ids) <= 10 for ids in pages)
            seen = [job_id for ids in pages for job_id in ids]
            assert seen == near_ids + far_ids  # soonest first, each due a second apart
            await page.screenshot("search")

            # Due before an hour from now (UTC): the jobs within the horizon alone.
            edge = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() + 3600))
            await page.script("document.getElementById('search-to').value = arguments[0]", edge)
            await page.click("[data-testid=search-run]")
            await page.until_text("[data-testid=search-count]", "due to")
            assert [job_id for ids in await search_pages(page) for job_id in ids] == near_ids

            # Back to the first page: a new due time for one, fire another now.
            await page.click("[data-testid=search-first]")
            await page.until_text("[data-testid=search-count]", ": page 1,")
            moved, fired = near_ids[2], near_ids[1]
            before = await client.get(moved)
            assert before is not None
            await page.click(
                f"[data-testid=search-row][data-job-id='{moved}'] [data-testid=search-reschedule]"
            )
            await page.dialog("reschedule-dialog", True)
            await page.fill("#reschedule-delay", "7200")
            earliest = int(time.time() * 1000) + 7_200_000
            await page.click("[data-testid=reschedule-ok]")
            await page.until_text("[data-testid=search-message]", f"Rescheduled {moved}")
            latest = int(time.time() * 1000) + 7_200_000
            after = await client.get(moved)
            assert after is not None and after.status == JobStatus.PENDING
            assert earliest <= after.due_ms <= latest
            assert before.due_ms < earliest - 3_600_000  # it was due in 30 min

            await page.click(
                f"[data-testid=search-row][data-job-id='{fired}'] [data-testid=search-fire]"
            )
            await page.dialog("confirm-dialog", True)
            assert await page.text("[data-testid=confirm-ids]") == fired
            await page.click("[data-testid=confirm-ok]")
            await page.until_text("[data-testid=search-message]", f"Due now: {fired}")

            async def fired_now() -> bool:
                record = await client.get(fired)
                return record is not None and record.status == JobStatus.FIRED

            assert await wait_for(fired_now, timeout_s=WAIT_S)

            # The pending counts: what a COUNT(*) in MySQL says, split at the horizon.
            near_n, beyond_n = await pending_in_mysql(client, settings.redis_horizon_ms)
            assert (near_n, beyond_n) == (10, 13 + 1 + 1)  # moved beyond; `elsewhere`
            topic_near, topic_beyond = await pending_in_mysql(
                client, settings.redis_horizon_ms, topic
            )
            await page.open("#cluster")
            await page.until_text(
                "[data-testid=pending-total]", re.compile(rf"^{near_n + beyond_n}$")
            )
            split = await page.text("[data-testid=pending-split]")
            assert split == f"{near_n} in Redis · {beyond_n} beyond horizon"
            row = f"[data-testid=pending-row][data-topic='{topic}']"
            assert await page.text(f"{row} [data-testid=pending-topic-redis]") == str(topic_near)
            assert await page.text(f"{row} [data-testid=pending-topic-beyond]") == str(topic_beyond)
            assert (topic_near, topic_beyond) == (10, 14)
            await page.screenshot("counts")

            # The expired job, in its own view.
            await page.open("#expired")
            await page.until_text("[data-testid=expired-count]", "1 expired")
            assert await page.attributes("[data-testid=expired-row]", "data-job-id") == [expiring]


async def test_cancel_all_matching_confirms_the_count_and_refuses_a_changed_selection(
    driver: WebDriver, settings: Settings, client: DelayClient
) -> None:
    """One row cancelled from the list; then "Cancel all matching": the dialog says how
    many, Back changes nothing, a job that starts matching while the dialog is open makes
    the server refuse (nothing cancelled), and confirmed again it cancels them all."""
    kind = f"close-{uuid.uuid4().hex[:6]}"
    jobs = [
        {"topic": "orders.close", "payload": n, "delay": 3600 + n, "biz_type": kind}
        for n in range(5)
    ]
    ids = await client.schedule_many(jobs)
    keep = await client.schedule("orders.close", 9, delay=3600, biz_type="other")

    async def statuses(job_ids: list[str]) -> set[JobStatus]:
        rows = await client.mysql.get_many(job_ids)
        return {rows[job_id].status for job_id in job_ids}

    async with console(driver, settings, client) as (page, _):
        await page.open("#jobs")
        await page.fill("#search-biz-type", kind)
        await page.click("[data-testid=search-run]")
        await page.until_text("[data-testid=search-count]", "5 jobs")
        await page.click(
            f"[data-testid=search-row][data-job-id='{ids[0]}'] [data-testid=search-cancel]"
        )
        await page.dialog("confirm-dialog", True)
        await page.click("[data-testid=confirm-ok]")
        await page.until_text("[data-testid=search-message]", f"Cancelled {ids[0]}")
        assert await statuses(ids[:1]) == {JobStatus.CANCELLED}
        await page.until_text("[data-testid=search-count]", "4 jobs")  # pending only

        await page.click("[data-testid=search-cancel-all]")
        await page.dialog("confirm-dialog", True)
        assert await page.text("#confirm-title") == "Cancel 4 jobs?"
        await page.click("[data-testid=confirm-cancel]")
        await page.dialog("confirm-dialog", False)
        assert await statuses(ids[1:]) == {JobStatus.PENDING}

        await page.click("[data-testid=search-cancel-all]")
        await page.dialog("confirm-dialog", True)
        late = await client.schedule("orders.close", 5, delay=3600, biz_type=kind)
        await page.click("[data-testid=confirm-ok]")
        await page.until_text("[data-testid=search-message]", "(409)")
        assert await statuses([*ids[1:], late]) == {JobStatus.PENDING}

        await page.click("[data-testid=search-cancel-all]")
        await page.dialog("confirm-dialog", True)
        assert await page.text("#confirm-title") == "Cancel 5 jobs?"
        await page.click("[data-testid=confirm-ok]")
        await page.until_text("[data-testid=search-message]", "Cancelled 5 jobs.")
        assert await statuses([*ids, late]) == {JobStatus.CANCELLED}
        assert await statuses([keep]) == {JobStatus.PENDING}
        await page.until_text("[data-testid=search-list]", "no job matches")
