"""The organiser's password and export against a participant with ordinary tools. One password is checked per
second for each login, in every process of the store (16 tabs and the direct routes of one login together), and a
flood from one login does not keep the organiser's login out; the direct REST routes do not reach the organiser's
events; the view is bound to the login that unlocked it; the export zip is served to that login only
(not to a participant, not after the organiser logged out, not after a restart). And no upload route is open."""

from __future__ import annotations

import json
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from chatbot.study import study_from_dict
from chatbot.trials.web import ORGANISER_GUESSES, Limiter, Unlocked, may_guess
from chatbot.web.guard import PRIVATE
from memory.store import Store
from tests.helpers import call, dep_index, serve

PLAN = {"id": "org", "title": "연구", "strategies": ["keem"], "sessions": 2, "min_gap_hours": 0, "consent": "동의서"}
LOGINS = [("organiser", "pw-o"), ("P001", "pw-1")]


def test_the_limiter_lets_one_attempt_a_second_through_whatever_the_threads() -> None:
    limiter = Limiter(1.0)
    start = threading.Barrier(16)
    let_through: list[tuple[float, float]] = []  # (asked, answered) of each guess let through
    deadline = time.monotonic() + 2.5

    def guess() -> None:
        start.wait()
        while time.monotonic() < deadline:
            asked = time.monotonic()
            if limiter.take():
                let_through.append((asked, time.monotonic()))

    threads = [threading.Thread(target=guess) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert 2 <= len(let_through) <= 3 and limiter.taken == len(let_through)
    assert spanned(let_through) >= 0.99 * (len(let_through) - 1), sorted(let_through)


def spanned(let_through: list[tuple[float, float]]) -> float:
    """The seconds from the first guess asked to the last answered. Each guess let through was let in between its
    two stamps, so this holds the seconds between the first and the last let in; a stamp alone can be late (a busy
    thread), and comparing late stamps failed a correct limiter on a loaded machine."""
    asked, answered = zip(*let_through, strict=True)
    return max(answered) - min(asked)


def test_one_login_flooding_does_not_hold_back_another() -> None:
    now = [100.0]
    limiter = Limiter(1.0, clock=lambda: now[0])
    assert limiter.take("P001") and not limiter.take("P001")  # the participant's second guess in the second: refused
    assert limiter.take("organiser")  # the organiser's first guess is checked at once
    now[0] += 1.0
    assert limiter.take("P001") and limiter.taken == 3


def test_processes_of_one_store_check_one_guess_a_second_per_login_in_all(store_url: str) -> None:
    """`keem serve`: each app process has a limiter of its own; four stores on one database stand for four
    processes, each flooded from four threads by one participant login. The store's row makes it one checked guess a
    second in all (four without it), and the organiser's own login still gets in at once."""
    processes = [(Limiter(1.0), Store(store_url)) for _ in range(4)]
    start = threading.Barrier(16)
    let_through: list[tuple[float, float]] = []  # (asked, answered) of each guess let through
    # until three guesses got through (about 2 s), or 15 s on a machine so loaded that 16 threads on one SQLite
    # file let through only one in 2.5 s: the rate is the spacing asserted below, not a count in a fixed window
    deadline = time.monotonic() + 15

    def flood(limiter: Limiter, store: Store) -> None:
        start.wait()
        while time.monotonic() < deadline and len(let_through) < 3:
            asked = time.monotonic()
            if may_guess(limiter, store, "P001"):
                let_through.append((asked, time.monotonic()))

    threads = [threading.Thread(target=flood, args=p) for p in processes for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(let_through) >= 3
    assert spanned(let_through) >= 0.95 * (len(let_through) - 1), sorted(let_through)  # a second apart in all
    limiter, store = processes[1]
    assert may_guess(limiter, store, "organiser")
    for _, store in processes:
        store.close()


def cookies(url: str, name: str, password: str) -> httpx.Cookies:
    response = httpx.post(f"{url}login", data={"username": name, "password": password})
    assert response.status_code == 200, response.text
    return response.cookies


def output(messages: list[dict[str, Any]]) -> Any:
    done = [m for m in messages if m.get("msg") == "process_completed"]
    return done[-1] if done else messages


def unlock(url: str, app: Any, session: str, jar: httpx.Cookies, password: str) -> dict[str, Any]:
    """The password, typed in tab `session`; retried while the limiter says to wait (another test's guess)."""
    for _ in range(30):
        messages = call(url, dep_index(app, "unlock"), [password, None], session, jar)
        if "1초에 한 번만" not in str(messages):
            return output(messages)
        time.sleep(0.5)
    raise AssertionError("the limiter never let the guess through")


@pytest.mark.slow
def test_16_tabs_and_the_direct_routes_guess_at_most_once_a_second_and_the_organiser_still_gets_in(
    tmp_path: Path,
) -> None:
    url, app, _bot, worker = serve(
        tmp_path / "keem.db", auth=LOGINS, study=study_from_dict(PLAN), admin_password="organiser-pw"
    )
    try:
        jar = cookies(url, "P001", "pw-1")  # a participant's login
        index = dep_index(app, "unlock")
        info = httpx.get(f"{url}gradio_api/info", cookies=jar).json()
        assert not any("unlock" in name for name in info.get("named_endpoints", {}))  # not in the API's listing
        body = {"data": ["guess", None], "fn_index": index, "session_hash": uuid.uuid4().hex}
        with httpx.Client(base_url=url, cookies=jar, timeout=30) as client:
            assert client.post("gradio_api/run/predict", json=body).status_code == 404
            assert client.post("gradio_api/api/predict", json=body).status_code == 404
            assert client.post("gradio_api/call/unlock", json={"data": ["guess", None]}).status_code == 404
            assert client.post("gradio_api/call/v2/unlock", json={"password": "guess"}).status_code == 404

        before = ORGANISER_GUESSES.taken
        deadline = time.monotonic() + 4.0
        answers: list[str] = []

        def tab(n: int) -> None:  # one tab of the participant's, guessing through the page's queue
            session = uuid.uuid4().hex
            start.wait()
            while time.monotonic() < deadline:
                answers.append(str(call(url, index, [f"guess-{n}", None], session, jar)))

        def direct() -> None:  # and the direct route, as fast as it answers
            start.wait()
            with httpx.Client(base_url=url, cookies=jar, timeout=30) as client:
                while time.monotonic() < deadline:
                    client.post("gradio_api/run/predict", json=body)

        organiser: list[tuple[float, Any]] = []

        def organiser_types() -> None:  # the real organiser, another login, types the right password mid-flood
            jar_o = cookies(url, "organiser", "pw-o")
            start.wait()
            time.sleep(1.0)
            typed = time.monotonic()
            done = output(call(url, index, ["organiser-pw", None], uuid.uuid4().hex, jar_o))
            organiser.append((time.monotonic() - typed, done))

        threads = [threading.Thread(target=tab, args=(n,)) for n in range(16)]
        threads += [threading.Thread(target=direct), threading.Thread(target=organiser_types)]
        start = threading.Barrier(len(threads))
        started = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        elapsed = time.monotonic() - started
        checked = ORGANISER_GUESSES.taken - before
        # the flood: about one a second, in all (the organiser's one guess besides)
        assert 2 <= checked <= elapsed + 2, (checked, elapsed)
        [(waited, done)] = organiser  # no login locks out another: the organiser's first guess is checked, within 5 s
        assert done.get("success") is True and waited < 5.0, (waited, done)
        assert len(answers) > checked  # the others were refused unchecked, at once
        assert any("1초에 한 번만" in a for a in answers)
        assert not any("organiser-view" in a or "참가자마다" in a for a in answers)  # nothing of the view leaked
    finally:
        app.close()
        worker.stop()


@pytest.mark.slow
def test_the_export_goes_to_the_login_that_unlocked_the_view_only(tmp_path: Path) -> None:
    db = tmp_path / "keem.db"
    study = study_from_dict(PLAN)
    url, app, _bot, worker = serve(db, auth=LOGINS, study=study, admin_password="organiser-pw")
    try:
        organiser, participant = cookies(url, "organiser", "pw-o"), cookies(url, "P001", "pw-1")
        sui = app.keem_study.ui
        sui.agree(sui.enter("P001").person, True)  # a participant who agreed: something to export
        tab = uuid.uuid4().hex
        assert unlock(url, app, tab, organiser, "organiser-pw")["success"] is True
        state = app.state_holder[tab]
        granted = next(v for v in state.state_data.values() if isinstance(v, Unlocked))
        assert granted == Unlocked("organiser")  # bound to the login, not to the tab

        # a participant who learnt the organiser's tab (its session hash) gets nothing through it
        stolen = str(call(url, dep_index(app, "download"), [None], tab, participant))
        assert "비밀번호를 먼저" in stolen and ".zip" not in stolen  # refused, in Korean, and no file
        refreshed = str(call(url, dep_index(app, "refresh"), [None], tab, participant))
        assert "비밀번호를 먼저" in refreshed and "참가자마다" not in refreshed

        messages = call(url, dep_index(app, "download"), [None], tab, organiser)
        made = output(messages)
        said = json.dumps(messages, ensure_ascii=False)[-3000:]  # all of it on a failure (seen once under load)
        assert made["success"] is True and "keem-private-" in str(made), said
        file_url = made["output"]["data"][0]["url"]
        assert "keem-private-" in file_url
        assert httpx.get(file_url, cookies=organiser).status_code == 200
        assert httpx.get(file_url, cookies=participant).status_code == 404
        assert httpx.get(file_url).status_code in (401, 403, 404)

        httpx.get(f"{url}logout", cookies=organiser)  # the organiser logs out
        assert httpx.get(file_url, cookies=participant).status_code == 404
        assert httpx.get(file_url, cookies=cookies(url, "P001", "pw-1")).status_code == 404
    finally:
        app.close()
        worker.stop()

    url2, app2, _bot2, worker2 = serve(db, auth=LOGINS, study=study, admin_password="organiser-pw")  # a restart
    try:
        path = file_url.split("file=", 1)[1]
        assert httpx.get(f"{url2}gradio_api/file={path}", cookies=cookies(url2, "P001", "pw-1")).status_code == 404
        PRIVATE.forget_all()  # what a new process holds: no grant, so nobody gets it
        assert httpx.get(f"{url2}gradio_api/file={path}", cookies=cookies(url2, "organiser", "pw-o")).status_code == 404
    finally:
        app2.close()
        worker2.stop()


@pytest.mark.slow
def test_no_upload_route_takes_a_file(tmp_path: Path) -> None:
    url, app, _bot, worker = serve(tmp_path / "keem.db")
    try:
        for route in ("upload", "process_recording", "component_server"):
            r = httpx.post(f"{url}gradio_api/{route}", files={"files": ("a.wav", b"RIFF0000WAVE")}, timeout=30)
            assert r.status_code == 403, (route, r.status_code, r.text)
        assert httpx.get(url).status_code == 200
    finally:
        app.close()
        worker.stop()
