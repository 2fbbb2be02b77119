"""The /playground page: its files and headers over HTTP, and the page itself in headless Chromium (Debian's
chromium and chromium-driver, which scripts/setup.sh installs as root), driven by selenium.

On the fakes (tests/server/all_fakes.py, seconds): the API key field, speech played back in the <audio> element,
an uploaded wav transcribed, the embeddings' similarity matrix, and an API error shown. On the real server (the
session's `real_api`, the shipped Gemma 3 270M): the page loads without console errors and a chat reply streams
in. The same server loads the real whisper-tiny.en and Kokoro on first use, but on a CPU adapter their first
requests take minutes (compiling pipelines; Kokoro minutes a sentence, tests/server/test_speech_kokoro.py), so
the espeak clip's transcription on the real Whisper is marked slow (`-m slow` runs it) and speech plays back on
the fake only.

Outside CI the browser tests skip when chromium or chromedriver is missing; with CI set they fail instead.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import tomllib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from server.routers.playground import ASSETS
from tests.server.all_fakes import fake_app
from tests.server.live_server import ROOT, SubprocessServer, ThreadServer
from tests.server.test_transcriptions import CLIP, CLIP_TEXT, GOLDEN, tone, wav_bytes

KEY = "playground-key"
PAGE_DIR = ROOT / "server" / "playground"


@pytest.fixture(scope="module")
def fake_server() -> Iterator[ThreadServer]:
    with ThreadServer(fake_app(env={"HEARTH_API_KEY": KEY})) as srv:
        yield srv


# ------------------------------------------------------------------------------------------ files and headers
def test_page_and_assets_are_served_without_a_key(fake_server: ThreadServer) -> None:
    page = httpx.get(f"{fake_server.url}/playground")
    assert page.status_code == 200
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    assert page.headers["cache-control"] == "no-cache"
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert '<script type="module" src="playground/app.js">' in page.text
    media = {"js": "text/javascript; charset=utf-8", "css": "text/css; charset=utf-8", "svg": "image/svg+xml"}
    for name in ASSETS:
        if name == "index.html":
            continue
        reply = httpx.get(f"{fake_server.url}/playground/{name}")
        assert reply.status_code == 200, name
        assert reply.headers["content-type"] == media[name.rsplit(".", 1)[1]]
        assert reply.headers["x-content-type-options"] == "nosniff"
        assert reply.content == (PAGE_DIR / name).read_bytes()
    # The API itself still needs the key.
    assert httpx.get(f"{fake_server.url}/v1/models").status_code == 401


def test_revalidation_head_and_unknown_files(fake_server: ThreadServer) -> None:
    first = httpx.get(f"{fake_server.url}/playground/app.js")
    again = httpx.get(f"{fake_server.url}/playground/app.js", headers={"If-None-Match": first.headers["etag"]})
    assert again.status_code == 304 and again.content == b""
    head = httpx.head(f"{fake_server.url}/playground")
    assert head.status_code == 200 and head.content == b""
    slash = httpx.get(f"{fake_server.url}/playground/")
    assert slash.status_code == 308 and slash.headers["location"] == "/playground"
    for name in ("nope.js", "index.html", "..%2Fapp.py"):
        missing = httpx.get(f"{fake_server.url}/playground/{name}")
        assert missing.status_code == 404, name
        assert missing.json()["error"]["type"] == "invalid_request_error"


def test_every_page_file_is_served_and_is_package_data() -> None:
    """A file left out of ASSETS or of pyproject's package-data would be missing from an installed server."""
    files = sorted(p.name for p in PAGE_DIR.iterdir() if p.is_file())
    assert files == sorted(ASSETS)
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["server"]
    for name in files:
        assert any(fnmatch.fnmatch(f"playground/{name}", glob) for glob in globs), name


# ---------------------------------------------------------------------------------------------- the browser
def _browser_binaries() -> tuple[str, str]:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if chromium and driver:
        return chromium, driver
    reason = "Debian's chromium and chromium-driver are not installed (scripts/setup.sh installs them as root)"
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    chromium, driver_path = _browser_binaries()
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1000,760",
                     "--autoplay-policy=no-user-gesture-required", "--mute-audio"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    driver.set_script_timeout(120)
    yield driver
    driver.quit()


def wait_for(browser: object, script: str, timeout: float = 60) -> object:
    """Poll a JavaScript expression until it is truthy; its value."""
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(browser, timeout, poll_frequency=0.1).until(lambda b: b.execute_script(f"return {script}"))


def open_page(browser: object, url: str, *, key: str = "") -> None:
    """Load the page with `key` in its key field (localStorage), and wait for its model list (or the error). The
    browser's log starts empty: what earlier pages logged (their own 401s and 400s) is dropped."""
    browser.get_log("browser")
    browser.get(f"{url}/playground")
    browser.execute_script("localStorage.clear(); "
                           "if (arguments[0]) localStorage.setItem('hearth.apiKey', arguments[0])", key)
    browser.refresh()
    wait_for(browser, "document.body.dataset.models")


def console_errors(browser: object) -> list[str]:
    return [entry["message"] for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]


def error_text(browser: object, form: str) -> str:
    return browser.execute_script(f"const e = document.querySelector('#{form} .error'); return e.hidden ? '' : "
                                  "e.textContent")


def submit(browser: object, form: str) -> None:
    browser.execute_script(f"document.getElementById('{form}').requestSubmit()")


TRANSCRIPT_OR_ERROR = ("document.getElementById('transcript').textContent || "
                       "document.querySelector('#transcribe-form .error').textContent")


def test_key_field_unlocks_the_api(browser: object, fake_server: ThreadServer) -> None:
    open_page(browser, fake_server.url)
    assert browser.execute_script("return document.body.dataset.models") == "failed"
    assert "You didn't provide an API key" in error_text(browser, "chat-form")
    field = browser.find_element("id", "api-key")
    field.send_keys(KEY)
    browser.execute_script("arguments[0].dispatchEvent(new Event('change'))", field)
    assert wait_for(browser, "document.body.dataset.models") == "loaded"
    assert error_text(browser, "chat-form") == ""
    assert browser.execute_script("return localStorage.getItem('hearth.apiKey')") == KEY
    kinds = browser.execute_script("return Object.fromEntries([...document.querySelectorAll('select[data-kind]')]"
                                   ".map(s => [s.dataset.kind, [...s.options].map(o => o.value)]))")
    assert kinds["chat"][0] == "gemma-3-270m" and "kokoro" not in kinds["chat"]
    assert kinds["transcription"][0] == "whisper-tiny.en" and "whisper-1" in kinds["transcription"]
    assert kinds["embeddings"][0] == "all-minilm-l6-v2"


def test_speech_plays_back(browser: object, fake_server: ThreadServer) -> None:
    open_page(browser, fake_server.url, key=KEY)
    browser.find_element("id", "tab-speak").click()
    wait_for(browser, "document.querySelector('#speak-form').voice.options.length > 1")
    browser.execute_script("const f = document.getElementById('speak-form'); f.response_format.value = 'wav'; "
                           "f.voice.value = 'af_sky'")
    submit(browser, "speak-form")
    duration = wait_for(browser, "(a => a.currentTime > 0 && a.duration)(document.getElementById('speech-audio'))")
    assert duration > 0.1
    assert browser.find_element("id", "speech-download").get_attribute("download") == "speech.wav"
    assert error_text(browser, "speak-form") == ""


def test_upload_is_transcribed(browser: object, fake_server: ThreadServer, tmp_path: Path) -> None:
    clip = tmp_path / "tone.wav"
    clip.write_bytes(wav_bytes(tone(1.5)))
    open_page(browser, fake_server.url, key=KEY)
    browser.find_element("id", "tab-transcribe").click()
    browser.find_element("css selector", "#transcribe-form input[type=file]").send_keys(str(clip))
    submit(browser, "transcribe-form")
    text = wait_for(browser, TRANSCRIPT_OR_ERROR)
    assert text == "Second 0. Second 1."  # the fake hears each loud second


def test_embeddings_matrix(browser: object, fake_server: ThreadServer) -> None:
    open_page(browser, fake_server.url, key=KEY)
    browser.find_element("id", "tab-embeddings").click()
    submit(browser, "embeddings-form")
    cells = wait_for(browser, "(t => !t.hidden && [...t.querySelectorAll('td')].slice(1).map(c => c.textContent))"
                              "(document.getElementById('similarity'))")
    values = [float(c) for c in cells]
    assert len(values) == 9  # three default texts
    assert values[0] == values[4] == values[8] == 1.0
    assert values[1] == values[3] and all(-1 <= v <= 1 for v in values)


def test_api_errors_are_shown(browser: object, fake_server: ThreadServer) -> None:
    open_page(browser, fake_server.url, key=KEY)
    browser.execute_script("const f = document.getElementById('chat-form'); f.max_tokens.value = 100000; "
                           "f.message.value = 'Hi'")
    submit(browser, "chat-form")
    shown = wait_for(browser, "document.querySelector('#chat-form .error').textContent")
    assert "maximum context length" in shown and "context_length_exceeded" in shown and "HTTP 400" in shown
    assert browser.execute_script("return document.querySelectorAll('#messages .assistant').length") == 0


# ------------------------------------------------------------------------------------ the real shipped models
# Records each length the assistant's text takes as it changes, to tell a streamed reply from one that arrives
# whole.
WATCH_REPLY = """
window.replyLengths = [];
new MutationObserver(() => {
  const reply = document.querySelector('#messages .assistant .content');
  const length = reply ? reply.textContent.length : 0;
  if (length && length !== window.replyLengths.at(-1)) window.replyLengths.push(length);
}).observe(document.getElementById('messages'), {subtree: true, childList: true, characterData: true});
"""


@pytest.mark.heavy
def test_real_chat_streams(browser: object, real_api: SubprocessServer) -> None:
    open_page(browser, real_api.url)
    assert console_errors(browser) == []
    browser.execute_script(WATCH_REPLY)
    browser.execute_script("const f = document.getElementById('chat-form'); f.temperature.value = 0; "
                           "f.max_tokens.value = 12; f.message.value = 'Say hello in French.'")
    submit(browser, "chat-form")
    wait_for(browser, "document.querySelector('#messages .assistant:not([aria-busy])') || "
                      "document.querySelector('#chat-form .error:not([hidden])')", timeout=300)
    assert error_text(browser, "chat-form") == ""
    reply = browser.find_element("css selector", "#messages .assistant .content").text
    assert reply.strip()
    lengths = browser.execute_script("return window.replyLengths")
    # the text grew as tokens arrived, not in one piece: a round's tokens come together, and 12 take two rounds
    assert len(lengths) >= 2, lengths
    assert browser.find_element("css selector", "#chat-form output[name=stats]").text.startswith("12 tokens")
    assert console_errors(browser) == []


@pytest.mark.heavy
@pytest.mark.slow  # whisper-tiny.en's first request compiles its pipelines: minutes on a busy 2-core lavapipe
def test_real_clip_is_transcribed(browser: object, real_api: SubprocessServer) -> None:
    open_page(browser, real_api.url)
    browser.find_element("id", "tab-transcribe").click()
    browser.find_element("css selector", "#transcribe-form input[type=file]").send_keys(str(GOLDEN / "clips" / CLIP))
    submit(browser, "transcribe-form")
    text = wait_for(browser, TRANSCRIPT_OR_ERROR, timeout=900)
    assert text == CLIP_TEXT, error_text(browser, "transcribe-form")
    assert console_errors(browser) == []
