"""The Dagster UI in headless Chromium: find the demo job, launch a day from its launchpad, see it
succeed; then the views of asset checks, progress lines, "Unsynced" and a broken workflow file.

Chromium and chromedriver come from Debian (`apt-get install chromium chromium-driver`, which
`scripts/test.sh` does when they are missing); Selenium is pointed at them (its Selenium
Manager cannot download a browser here). `CHROMIUM` and `CHROMEDRIVER` override the paths.
Set `UPDATE_UI_SCREENSHOTS=1` to also copy the screenshots into docs/ for docs/ui.md.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

import dagster as dg
import pytest

from tests.e2e.ui_cases import BROKEN_STEP, LOCATION, checked_config, make_ui_project, set_param
from tests.support.nodes import copy_nodes
from tests.support.paths import REPO
from tests.support.webserver import serve_webserver

DEMO = "nightly_shapes"


def _find(env: str, *names: str) -> str | None:
    if os.environ.get(env):
        return os.environ[env]
    return next((p for p in map(shutil.which, names) if p), None)


CHROMIUM = _find("CHROMIUM", "chromium", "chromium-browser")
CHROMEDRIVER = _find("CHROMEDRIVER", "chromedriver")

pytestmark = [
    pytest.mark.ui,
    pytest.mark.browser,
    # decided before any fixture starts a webserver
    pytest.mark.skipif(
        not (CHROMIUM and CHROMEDRIVER),
        reason="no Chromium here: install Debian's chromium and chromium-driver "
        "(scripts/test.sh does when run as root with apt-get), or set CHROMIUM and CHROMEDRIVER",
    ),
]


@pytest.fixture(scope="module")
def ui_project(tmp_path_factory) -> Path:
    """The UI cases' location (tests/e2e/ui_cases.py), in a folder the test edits."""
    return make_ui_project(tmp_path_factory.mktemp("ui_cases"), with_repository=True).parent


@pytest.fixture(scope="module")
def webserver(ui_project, tmp_path_factory):
    """One webserver for every view: the repository's location and the UI cases'."""
    home = tmp_path_factory.mktemp("dagster_home")
    with serve_webserver(ui_project / "workspace.yaml", home) as server:
        yield server


@pytest.fixture(scope="module")
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    # --no-sandbox: CI runs as root; --disable-dev-shm-usage: small /dev/shm in containers
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1600,1000",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    driver.implicitly_wait(0)
    try:
        yield driver
    finally:
        driver.quit()


def _save(driver, tmp_path: Path, name: str, *, docs: bool = False) -> Path:
    """A screenshot under the test's folder; with ``docs``, also a 256-colour copy in docs/ for
    docs/ui.md, only when asked for with UPDATE_UI_SCREENSHOTS=1 (never in CI)."""
    path = tmp_path / name
    assert driver.save_screenshot(str(path)), f"could not save {path}"
    if docs and os.environ.get("UPDATE_UI_SCREENSHOTS") == "1":
        from PIL import Image

        (REPO / "docs").mkdir(exist_ok=True)
        with Image.open(path) as image:
            image.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(
                REPO / "docs" / name, optimize=True
            )
    return path


def _skip_community_dialog(driver) -> None:
    """The first visit on localhost shows a "Join the Dagster community" dialog after a second:
    skip it (not shown once dismissed in this browser). The module's tests share one browser and
    one webserver: once this browser dismissed it, the later tests do not wait 8 s for a dialog
    that no longer comes."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    if getattr(driver, "_graphbook_community_dialog_skipped", False):
        return
    skip = (By.XPATH, "//button[normalize-space()='Skip']")
    try:
        WebDriverWait(driver, 8).until(EC.element_to_be_clickable(skip)).click()
        WebDriverWait(driver, 30).until(EC.invisibility_of_element_located(skip))
        driver._graphbook_community_dialog_skipped = True
    except TimeoutException:  # not shown (already dismissed for this instance)
        pass


def _edit(yaml_text: str, key: str, value: str) -> str:
    """Set ``key: value`` on the one line of the launchpad's YAML that holds ``key``."""
    pattern = re.compile(rf"^(\s*{re.escape(key)}:).*$", re.M)
    assert len(pattern.findall(yaml_text)) == 1, (
        f"expected one '{key}:' in the launchpad config:\n{yaml_text}"
    )
    return pattern.sub(lambda m: f"{m.group(1)} {value}", yaml_text)


def test_launch_demo_day_from_the_launchpad(webserver, browser, nightly_inputs, tmp_path):
    from selenium.common.exceptions import (
        ElementClickInterceptedException,
        NoSuchElementException,
        StaleElementReferenceException,
    )
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    start = time.time()
    driver = browser
    wait = WebDriverWait(driver, 60)
    day = nightly_inputs["day"]
    outputs = nightly_inputs["root"] / "browser-outputs"

    def act(action) -> None:
        """Run ``action(driver)``, again while the page re-renders under it (stale or covered
        elements)."""
        WebDriverWait(
            driver,
            60,
            ignored_exceptions=(
                StaleElementReferenceException,
                ElementClickInterceptedException,
                NoSuchElementException,
            ),
        ).until(lambda d: action(d) or True)

    def click(xpath: str) -> None:
        act(lambda d: wait.until(EC.element_to_be_clickable((By.XPATH, xpath))).click())

    def type_partition(d) -> None:
        field = d.find_element(By.CSS_SELECTOR, "input[placeholder='Partition']")
        field.click()
        field.send_keys(Keys.CONTROL, "a")
        field.send_keys(day)

    driver.get(webserver.url)
    _skip_community_dialog(driver)

    # Jobs -> the demo job: its asset graph
    click("//a[normalize-space()='Jobs']")
    click(f"//a[normalize-space()='{DEMO}']")
    wait.until(EC.url_contains(f"/jobs/{DEMO}"))
    wait.until(
        EC.visibility_of_element_located((By.XPATH, "//*[normalize-space()='ClassifyShapes']"))
    )
    _save(driver, tmp_path, "ui-job.png")

    # Materialize all -> the menu beside it -> Open launchpad
    click("//button[.//div[@aria-label='arrow_drop_down']]")
    click("//*[normalize-space()='Open launchpad']")
    # the config editor (CodeMirror) fills in once the launchpad has generated the default config
    editor = (
        "Array.from(document.querySelectorAll('.CodeMirror')).map(e => e.CodeMirror)"
        ".find(cm => cm.getValue().startsWith('ops:'))"
    )
    wait.until(lambda d: d.execute_script(f"return !!({editor})"))
    act(type_partition)
    click(f"//button[@role='menuitem'][normalize-space()='{day}']")
    wait.until(
        EC.visibility_of_element_located((By.XPATH, f"//*[normalize-space()='partition: {day}']"))
    )

    # Edit the step parameters in the editor: the test's folders, threshold 0, 20-pixel copies.
    # (Picking the partition regenerated the config: wait for it again.)
    wait.until(lambda d: d.execute_script(f"return !!({editor})"))
    text = driver.execute_script(f"return ({editor}).getValue()")
    assert f"{DEMO}__SaveResized" in text and "{partition_key}" in text, text
    text = _edit(text, "folder", f"{nightly_inputs['incoming']}/{{partition_key}}")
    text = _edit(text, "output_dir", f"{outputs}/{{partition_key}}")
    text = _edit(text, "checkpoint", str(nightly_inputs["checkpoint"]))
    text = _edit(text, "threshold", "0.0")
    text = _edit(text, "size", "20")
    driver.execute_script(f"({editor}).setValue(arguments[0])", text)
    time.sleep(1)  # nothing re-renders the editor over the edit
    assert driver.execute_script(f"return ({editor}).getValue()") == text
    wait.until(EC.visibility_of_element_located((By.XPATH, "//*[normalize-space()='No errors']")))
    materialize = wait.until(
        EC.element_to_be_clickable((By.XPATH, "//button[normalize-space()='Materialize']"))
    )
    ActionChains(driver).move_to_element(
        materialize
    ).perform()  # no tooltip of the partition field in the screenshot
    _save(driver, tmp_path, "ui-launchpad.png", docs=True)

    materialize.click()
    wait.until(EC.url_matches(r"/runs/[0-9a-f-]{36}"))
    run_id = driver.current_url.rstrip("/").split("/")[-1]
    # the demo run takes tens of seconds on 2 CPU cores; a failed run fails here with its errors,
    # not after a timeout
    webserver.expect_success(run_id, timeout_s=300)
    # ... and the run page's status tag turns to Success
    wait.until(
        EC.visibility_of_element_located(
            (
                By.XPATH,
                "//div[@role='img' and @aria-label='run_success']"
                "/following-sibling::div[normalize-space()='Success']",
            )
        )
    )
    time.sleep(1)  # let the event list render its last rows for the screenshot
    shot = _save(driver, tmp_path, "ui-run-success.png", docs=True)
    assert shot.stat().st_size > 10_000
    print(
        f"browser test: {time.time() - start:.1f} s from opening the UI to the run page "
        "showing Success"
    )

    # the workflow's lineage: the incoming folder (external) -> the four steps, ReviewSplit's
    # two pins
    driver.get(f"{webserver.url}/locations/graphbook/asset-groups/{DEMO}/lineage")
    for name in (
        "incoming",
        "IncomingImages",
        "ClassifyShapes",
        "confident",
        "review",
        "SaveResized",
    ):
        wait.until(EC.visibility_of_element_located((By.XPATH, f"//*[normalize-space()='{name}']")))
    wait.until(
        lambda d: not d.find_elements(By.XPATH, "//*[normalize-space()='Loading...']")
    )  # the nodes' partition counts
    _save(driver, tmp_path, "ui-lineage.png", docs=True)

    # what the UI launched: that day's partition, with the parameters edited in the editor
    instance = dg.DagsterInstance.from_config(str(webserver.home))
    assert instance.get_run_by_id(run_id).tags["dagster/partition"] == day
    from PIL import Image

    written = sorted((outputs / day).rglob("*.png"))
    assert len(written) == nightly_inputs["count"]  # threshold 0: nothing held back for review
    for path in written:
        with Image.open(path) as image:
            assert image.size == (20, 20), path


def test_checks_progress_unsynced_and_broken_job_views(webserver, browser, ui_project, tmp_path):
    """The views on the UI cases' location (tests/e2e/ui_cases.py): a run's progress lines, an
    asset's failed blocking check, "Unsynced" after a parameter edit, and the job of a workflow
    that failed to load, with its error."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    start = time.time()
    driver = browser
    wait = WebDriverWait(driver, 60)

    def visible(xpath: str) -> None:
        """Wait for ``xpath``; if it never shows, fail with the page's text and a screenshot."""
        try:
            wait.until(EC.visibility_of_element_located((By.XPATH, xpath)))
        except TimeoutException:
            shot = _save(driver, tmp_path, "not-shown.png")
            text = driver.find_element(By.TAG_NAME, "body").text
            raise AssertionError(
                f"{xpath} not shown on {driver.current_url} (screenshot {shot}):\n{text[:3000]}"
            ) from None

    # accuracy 0.5: the blocking check on Score fails and After does not run (launched as the
    # launchpad would, through GraphQL, to keep the test short)
    run_id = webserver.launch("checked", checked_config(score=0.5), repositoryLocationName=LOCATION)
    assert webserver.wait(run_id) == "FAILURE"

    # the run page, its log filtered on "items/s" (as a user would type it): short progress lines
    driver.get(f"{webserver.url}/runs/{run_id}")
    _skip_community_dialog(driver)
    visible("//*[normalize-space()='RUN_FAILURE']")  # the whole log is loaded
    log_filter = driver.find_element(By.CSS_SELECTOR, "input[placeholder^='Filter']")
    log_filter.send_keys("items/s", Keys.ENTER)
    wait.until(lambda d: not d.find_elements(By.XPATH, "//*[normalize-space()='RUN_FAILURE']"))
    visible("//*[contains(text(), '/12 (') and contains(text(), 'items/s · ETA')]")
    shown = [
        e.text for e in driver.find_elements(By.XPATH, "//*[contains(text(), 'items/s · ETA')]")
    ]
    assert any(re.match(r"^\d+/12 \(\d+%\) · [\d.]+ items/s · ETA ", t) for t in shown), shown
    time.sleep(1)  # let the log rows settle for the screenshot
    _save(driver, tmp_path, "ui-run-progress.png", docs=True)

    # Score's checks tab: the blocking check failed on this run, with its value
    driver.get(f"{webserver.url}/assets/checked/Score?view=checks")
    visible("//*[normalize-space()='accuracy_min_0_9']")
    visible("//*[normalize-space()='Failed']")
    _save(driver, tmp_path, "ui-asset-checks.png", docs=True)

    # a parameter edited in the workflow file, the location reloaded: Items shows Unsynced
    set_param(ui_project / "checked.json", "1", "n", 10)
    reload = webserver.graphql(
        "mutation($l: String!) { reloadRepositoryLocation(repositoryLocationName: $l) {"
        " __typename } }",
        {"l": LOCATION},
    )["reloadRepositoryLocation"]
    assert reload["__typename"] == "WorkspaceLocationEntry", reload
    stale = webserver.graphql(
        '{ assetNodeOrError(assetKey: {path: ["checked", "Items"]}) {'
        " ... on AssetNode { staleStatus } } }"
    )["assetNodeOrError"]
    assert stale == {"staleStatus": "STALE"}, stale
    driver.get(f"{webserver.url}/assets/checked/Items")
    unsynced = "//*[starts-with(normalize-space(), 'Unsynced')][not(*)]"  # "Unsynced (1)"
    visible(unsynced)
    # hovering the badge lists the causes: the code version changed
    ActionChains(driver).move_to_element(driver.find_element(By.XPATH, unsynced)).perform()
    visible("//*[contains(translate(text(), 'CV', 'cv'), 'code version')]")
    _save(driver, tmp_path, "ui-unsynced.png", docs=True)

    # the broken workflow's job, its load error as the description
    driver.get(f"{webserver.url}/locations/{LOCATION}/jobs/broken")
    visible("//*[starts-with(normalize-space(), 'FAILED TO LOAD:')]")
    visible(f"//*[contains(text(), '{BROKEN_STEP}')]")
    _save(driver, tmp_path, "ui-broken-job.png", docs=True)
    print(f"browser views of checks, progress, Unsynced, broken job: {time.time() - start:.1f} s")


def test_thumbnails_of_a_pin_and_of_a_failed_item_are_shown(
    webserver, browser, nightly_inputs, tmp_path
):
    """The demo's ``ReviewSplit/review`` asset page shows the day's thumbnails (rendered images,
    natural width > 0), and a run failed on a corrupt image shows that the item does not open."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    driver = browser
    wait = WebDriverWait(driver, 60)

    def visible(xpath: str):
        try:
            return wait.until(EC.visibility_of_element_located((By.XPATH, xpath)))
        except TimeoutException:
            shot = _save(driver, tmp_path, "not-shown.png")
            text = driver.find_element(By.TAG_NAME, "body").text
            raise AssertionError(
                f"{xpath} not shown on {driver.current_url} (screenshot {shot}):\n{text[:3000]}"
            ) from None

    def open_markdown(entry: str) -> None:
        """Click the ``[Show Markdown]`` of the metadata entry ``entry`` (its dialog opens)."""
        visible(
            f"//td[normalize-space()='{entry}']/following-sibling::td"
            "//a[normalize-space()='[Show Markdown]']"
        ).click()
        visible("//*[@role='dialog']")

    # a day of the demo, most notes to review (the briefly trained model is rarely confident)
    incoming = tmp_path / "incoming"
    shutil.copytree(nightly_inputs["incoming"], incoming)
    day = nightly_inputs["day"]
    config = {
        "ops": {
            f"{DEMO}__IncomingImages": {"config": {"folder": f"{incoming}/{{partition_key}}"}},
            f"{DEMO}__ReviewSplit": {"config": {"threshold": 0.999}},
            f"{DEMO}__SaveResized": {"config": {"output_dir": str(tmp_path / "out")}},
        },
        "resources": {
            f"{DEMO}__ShapesModel": {"config": {"checkpoint": str(nightly_inputs["checkpoint"])}}
        },
    }
    run_id = webserver.launch(DEMO, config, tags={"dagster/partition": day})
    webserver.expect_success(run_id, timeout_s=300)

    driver.get(f"{webserver.url}/assets/{DEMO}/ReviewSplit/review?view=events")
    _skip_community_dialog(driver)
    visible(f"//*[contains(text(), '{run_id[:8]}')]")  # this run's materialization is shown
    open_markdown("preview")
    visible("//*[@role='dialog']//*[contains(text(), 'images, sampled evenly')]")
    images = "Array.from(document.querySelectorAll('[role=dialog] img'))"
    wait.until(lambda d: d.execute_script(f"return {images}.length") > 0)
    wait.until(lambda d: d.execute_script(f"return {images}.every(i => i.complete)"))
    widths = driver.execute_script(f"return {images}.map(i => i.naturalWidth)")
    sources = driver.execute_script(f"return {images}.map(i => i.src.slice(0, 23))")
    assert len(widths) == 12 and all(w > 0 for w in widths), widths
    assert set(sources) == {"data:image/jpeg;base64,"}, sources
    visible("//*[@role='dialog']//*[contains(text(), ' · 0.')]")  # label · confidence captions
    _save(driver, tmp_path, "ui-preview.png", docs=True)

    # the next day holds a truncated PNG: the run fails on it, and its failure says so
    broken_day = "2025-06-02"
    (incoming / broken_day).mkdir()
    for path in sorted((incoming / day).glob("*.png"))[:3]:
        shutil.copy(path, incoming / broken_day / path.name)
    broken = incoming / broken_day / "zz_broken.png"
    broken.write_bytes(next((incoming / day).glob("*.png")).read_bytes()[:40])
    failed = webserver.launch(DEMO, config, tags={"dagster/partition": broken_day})
    assert webserver.wait(failed, timeout_s=300) == "FAILURE"
    driver.get(f"{webserver.url}/runs/{failed}")
    visible("//*[normalize-space()='RUN_FAILURE']")  # the whole log is loaded
    log_filter = driver.find_element(By.CSS_SELECTOR, "input[placeholder^='Filter']")
    log_filter.send_keys("type:STEP_FAILURE", Keys.ENTER)  # the failure's row
    wait.until(lambda d: not d.find_elements(By.XPATH, "//*[normalize-space()='RUN_FAILURE']"))
    visible("//*[normalize-space()='View full message']").click()  # with its metadata
    visible(
        "//*[@role='dialog']//td[normalize-space()='item_preview']/following-sibling::td"
        f"[contains(., '{broken.name} does not open as an image')]"
    )
    _save(driver, tmp_path, "ui-failed-item.png", docs=True)


def test_hostile_captions_and_a_table_of_nan_and_lists_render_safely(
    webserver, browser, tmp_path, listener
):
    """Notes whose caption fields are markup (``<script>``, an image and a ``javascript:`` link
    to a listener of the test's own) and whose table holds NaN, lists and mixed types, run into
    the webserver's instance: the preview shows the markup as text, no request reaches the
    listener, no script runs, and ``table_preview`` renders its rows (no "Could not parse")."""
    from PIL import Image
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    from dagster_graphbook import run_workflow
    from tests.support.workflows import step_node, write_workflow

    port = listener.port
    image = tmp_path / "good.png"
    Image.new("RGB", (40, 40), (0, 200, 0)).save(image)
    nodes = copy_nodes(tmp_path / "nodes", "hostile_nodes.py", "hostile_pages")
    wf = write_workflow(tmp_path, "hostile", [step_node("0", "Hostile", source=True)], [])
    run = run_workflow(
        wf,
        custom_nodes=[nodes],
        params={"Hostile.image": str(image), "Hostile.port": port},
        preview={"caption": ["script", "img", "link", "html"]},
        dagster_home=str(webserver.home),
        executor="in_process",
    )
    assert run.success, run.failure

    driver = browser
    wait = WebDriverWait(driver, 60)
    driver.get(f"{webserver.url}/assets/hostile/Hostile?view=events")
    _skip_community_dialog(driver)
    show = "//td[normalize-space()='{}']/following-sibling::td//a[normalize-space()='{}']"
    wait.until(EC.element_to_be_clickable((By.XPATH, show.format("preview", "[Show Markdown]"))))
    driver.find_element(By.XPATH, show.format("preview", "[Show Markdown]")).click()
    dialog = "//*[@role='dialog']"
    wait.until(EC.visibility_of_element_located((By.XPATH, f"{dialog}//img")))
    images = "Array.from(document.querySelectorAll('[role=dialog] img'))"
    wait.until(lambda d: d.execute_script(f"return {images}.every(i => i.complete)"))
    sources = driver.execute_script(f"return {images}.map(i => i.src.slice(0, 23))")
    assert sources == ["data:image/jpeg;base64,"] * 2, sources  # the thumbnails, no other
    text = driver.find_element(By.XPATH, dialog).text
    assert "<script>z=1</script>" in text and f"![x](//127.0.0.1:{port})" in text, text
    assert "[a](javascript:z=2)" in text, text
    links = driver.execute_script(
        "return Array.from(document.querySelectorAll('[role=dialog] a')).map(a => a.href)"
    )
    assert not [h for h in links if h.startswith("javascript")], links
    _save(driver, tmp_path, "ui-hostile-preview.png")

    # the sink table's first rows, shown inline: NaN an empty cell, lists as text
    driver.get(f"{webserver.url}/assets/hostile/Hostile?view=events")  # the dialog closed
    cell = "//td[normalize-space()='table_preview']/following-sibling::td"
    wait.until(EC.visibility_of_element_located((By.XPATH, f"{cell}//table")))
    table = driver.find_element(By.XPATH, cell).text
    _save(driver, tmp_path, "ui-hostile-table.png")
    assert "Could not parse" not in table, table
    assert "[1, 2]" in table and "1.5" in table and "2.5" in table, table
    rows = driver.find_elements(By.XPATH, f"{cell}//table//tr[td]")
    assert len(rows) == 2, table
    time.sleep(0.5)  # anything the page would fetch has been asked for
    assert driver.execute_script("return typeof window.z") == "undefined"  # no script ran
    assert listener.connections == [], "the page sent a request to the test's listener"
