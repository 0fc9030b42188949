"""The dashboard as a person sees it: headless Chromium loads the page while two managed
built-in vehicles fly (``ManagedManager`` + ``Flight``); the test reads the holder names,
the instances, a mode change and an altitude that rises during a takeoff from the page."""

from __future__ import annotations

import re
import threading
import time

from dashboard_page import browser, dashboard, get_json, shot, wait_text  # noqa: F401  (fixtures)

SPEEDUP = 2  # a climb of 20 m takes seconds: the 1 Hz state file shows it rising


def altitude(text: str) -> float | None:
    m = re.match(r"(-?[0-9.]+) m", text)
    return float(m.group(1)) if m else None


def test_page_shows_two_vehicles_flying(env, dashboard, browser, tmp_path, monkeypatch):  # noqa: F811
    from sitlpool.flight import Flight
    from sitlpool.process import ManagedManager

    url, _ = dashboard()
    m = ManagedManager()
    try:
        a = m.start("alpha", speedup=SPEEDUP, owner="agent-alpha")
        b = m.start("beta", speedup=SPEEDUP, owner="agent-beta")
        browser.goto(url)
        for h, who in ((a, "agent-alpha"), (b, "agent-beta")):
            row = f'#pool tr.held[data-instance="{h.instance}"]'
            wait_text(browser, f"{row} td.holder", lambda t, w=who: t.startswith(w), what=f"holder {who}")
            wait_text(browser, f"{row} td.state", lambda t: t == "held")
            wait_text(browser, f"{row} td.sitl", lambda t: "managed" in t and "running" in t)
            card = f'.vehicle[data-instance="{h.instance}"]'
            wait_text(browser, f"{card} .holder", lambda t, w=who: t.startswith(w), what=f"{who}'s card")
        assert browser.locator("#conn").text_content() == "live"
        shot(browser, tmp_path / "dashboard-two-vehicles.png")

        # a mode change of alpha's, seen on the page
        card = f'.vehicle[data-instance="{a.instance}"]'
        first = wait_text(browser, f"{card} dd.mode", lambda t: t not in ("", "?"), timeout=30)
        fa, fb = Flight(a.link), Flight(b.link)
        fa.set_mode("GUIDED")
        t0 = time.monotonic()
        wait_text(browser, f"{card} dd.mode", lambda t: t == "GUIDED", what=f"the mode change {first} -> GUIDED")
        mode_lag = time.monotonic() - t0

        # both take off; the page's altitude of alpha rises
        errors: list[BaseException] = []

        def fly(f: Flight, alt: float) -> None:
            try:
                f.arm_and_takeoff(alt, timeout=90)
            except BaseException as e:  # noqa: BLE001  (reported by the test below)
                errors.append(e)

        threads = [threading.Thread(target=fly, args=(fa, 20.0)), threading.Thread(target=fly, args=(fb, 6.0))]
        for t in threads:
            t.start()
        seen: list[float] = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not errors:
            text = browser.locator(f"{card} dd.altitude").text_content() or ""
            alt = altitude(text)
            if alt is not None and (not seen or alt != seen[-1]):
                seen.append(alt)
            if seen and seen[-1] > 18:
                break
            browser.wait_for_timeout(250)
        for t in threads:
            t.join(120)
        assert not errors, errors
        assert seen and seen[-1] > 18, f"alpha's altitude on the page: {seen}"
        rising = [x for x in seen if 0.5 < x < 18]
        assert len(rising) >= 2, f"the page never showed alpha climbing (≤ 1 s behind): {seen}"
        wait_text(browser, f"{card} dd.armed", lambda t: t == "ARMED")
        wait_text(
            browser,
            f'.vehicle[data-instance="{b.instance}"] dd.altitude',
            lambda t: (altitude(t) or 0) > 4,
            what="beta's altitude",
        )
        assert mode_lag < 3, f"the mode change took {mode_lag:.1f}s to reach the page"
        # alpha flies 40 m north: where the state file carries positions, the map draws its track
        v = a.link.vehicle
        fa.goto(v.lat + 40 / 111_320, v.lon, 20)
        state = get_json(url, "/api/state")
        [va] = [x for x in state["vehicles"] if x["instance"] == a.instance]
        if "lat" in va:  # statefile writes positions (issue 25): the track is on the map
            browser.wait_for_function(
                f"""() => {{
                  const p = document.querySelector('.vehicle[data-instance="{a.instance}"] svg.map polyline.track');
                  return p && p.getAttribute('points').split(' ').length > 4;
                }}""",
                timeout=30_000,
            )
            assert browser.locator(f"{card} svg.map circle.position").count() == 1
            wait_text(browser, f"{card} dd.ready-to-arm", lambda t: t != "", what="ready to arm")
        else:
            assert browser.locator(f"{card} svg.map text").text_content() == "no position in the state file"
        browser.wait_for_timeout(1500)
        # the flight picture of what the dashboard saw, under alpha's card
        browser.locator(f"{card} details summary").click()
        browser.wait_for_function(
            f"""() => {{
              const i = document.querySelector('.vehicle[data-instance="{a.instance}"] details img');
              return i && i.complete && i.naturalWidth > 1000;
            }}""",
            timeout=20_000,
        )
        row = f'#pool tr.held[data-instance="{a.instance}"] td.vehicle-line'
        wait_text(browser, row, lambda t: t.startswith("GUIDED, armed, "), what="alpha's line in the pool")
        shot(browser, tmp_path / "dashboard-flying.png")  # docs/img/dashboard.png is one of these, copied by hand
        assert not browser.errors, browser.errors  # type: ignore[attr-defined]
    finally:
        m.close_all()
