"""The dashboard as a person sees it: headless Chromium loads the page while two managed
built-in vehicles fly (``ManagedManager`` + ``Flight``); the test reads the holder names,
the instances, a mode change and an altitude that rises during a takeoff from the page, the
live log's plots moving while alpha climbs, beta's log in the kept logs once its session
closed (with its summary and picture), and, on a second dashboard given a tile URL, map
tiles under the track (from a tile server of the test's own: no internet)."""

from __future__ import annotations

import http.server
import io
import re
import threading
import time
import urllib.request

from dashboard_page import browser, dashboard, get_json, shot, wait_text  # noqa: F401  (fixtures)

SPEEDUP = 2  # a climb of 20 m takes seconds: the 1 Hz state file shows it rising


def tile_server() -> tuple[http.server.ThreadingHTTPServer, list[str]]:
    """A map tile server on 127.0.0.1: any /z/x/y.png is a light 256x256 PNG; the paths asked for are kept."""
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (256, 256), (226, 236, 216))
    ImageDraw.Draw(img).rectangle((0, 0, 255, 255), outline=(190, 200, 180))
    buf = io.BytesIO()
    img.save(buf, "PNG")
    png, asked = buf.getvalue(), []

    class Tiles(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802  (http.server's name)
            asked.append(self.path)
            self.send_response(200)
            self.send_header("Content-Type", "image/png")
            self.send_header("Content-Length", str(len(png)))
            self.end_headers()
            self.wfile.write(png)

        def log_message(self, *a) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Tiles)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, asked


def plot_value(text: str, series: str) -> float | None:
    """``altitude: CTUN.Alt 12.3, BARO.Alt 12.2 m`` -> 12.3 for CTUN.Alt."""
    m = re.search(re.escape(series) + r" (-?[0-9.]+)", text)
    return float(m.group(1)) if m else None


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
        plotted: list[float] = []  # CTUN.Alt as the live log's altitude plot says it
        lengths: list[int] = []  # points of that plot's line
        alt_plot = f'{card} svg.plot[data-plot="altitude"]'
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not errors:
            text = browser.locator(f"{card} dd.altitude").text_content() or ""
            alt = altitude(text)
            if alt is not None and (not seen or alt != seen[-1]):
                seen.append(alt)
            if browser.locator(alt_plot).count():
                x = plot_value(browser.locator(f"{alt_plot} text").first.text_content() or "", "CTUN.Alt")
                if x is not None and (not plotted or x != plotted[-1]):
                    plotted.append(x)
                line = browser.locator(f'{alt_plot} polyline[data-series="CTUN.Alt"]')
                if line.count():
                    lengths.append(len((line.get_attribute("points") or "").split()))
            if seen and seen[-1] > 18 and plotted and plotted[-1] > 18:
                break
            browser.wait_for_timeout(250)
        for t in threads:
            t.join(120)
        assert not errors, errors
        assert seen and seen[-1] > 18, f"alpha's altitude on the page: {seen}"
        rising = [x for x in seen if 0.5 < x < 18]
        assert len(rising) >= 2, f"the page never showed alpha climbing (≤ 1 s behind): {seen}"
        # the live log's plots appeared and moved: CTUN.Alt read from the growing .BIN rose, its line grew
        assert plotted and plotted[-1] > 18, f"the altitude plot's CTUN.Alt: {plotted}"
        assert len([x for x in plotted if 0.5 < x < 18]) >= 2, f"the plot never showed the climb: {plotted}"
        assert lengths and lengths[-1] > lengths[0] >= 0, f"the plot's line did not grow: {lengths}"
        assert browser.locator(f"{card} svg.plot").count() == 5
        wait_text(browser, f"{card} .liveplots .logname", lambda t: t.startswith("live log 0"), what="the log's name")
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

        # beta's session closes: its log is kept, and listed with its summary and picture
        m.stop("beta")
        log_row = f'#logs tr[data-instance="{b.instance}"]'
        brief = wait_text(
            browser, f"{log_row} td.brief", lambda t: " s, " in t, timeout=60, what="beta's kept log and its summary"
        )
        assert "GUIDED" in brief and "max " in brief, brief
        log_id = browser.locator(f"{log_row} a.log-id").first.text_content()
        href = browser.locator(f"{log_row} a.log-picture").first.get_attribute("href")
        assert href == f"/api/logs/{log_id}/picture.png"
        with urllib.request.urlopen(url.split("?")[0].rstrip("/") + href, timeout=30) as r:
            png = r.read()
        assert png.startswith(b"\x89PNG") and len(png) > 5000
        wait_text(browser, "#vehicles", lambda t: f"instance {b.instance} " not in t, what="beta's card gone")
        shot(browser, tmp_path / "dashboard-flying.png")  # docs/img/dashboard.png is one of these, copied by hand
        assert not browser.errors, browser.errors  # type: ignore[attr-defined]

        # a second dashboard with a tile URL: the page draws tiles under alpha's track
        srv, asked = tile_server()
        try:
            tiles = f"http://127.0.0.1:{srv.server_address[1]}/{{z}}/{{x}}/{{y}}.png"
            url2, _ = dashboard(extra_env={"SITLPOOL_DASHBOARD_TILES": tiles})
            browser.goto(url2)
            browser.wait_for_function(
                f"""() => [...document.querySelectorAll('.vehicle[data-instance="{a.instance}"] svg.map image.tile')]
                        .length > 0""",
                timeout=30_000,
            )
            wait_for_asked = time.monotonic() + 20
            while not asked and time.monotonic() < wait_for_asked:
                browser.wait_for_timeout(200)
            assert asked and all(re.fullmatch(r"/1[5-9]/[0-9]+/[0-9]+\.png", p) for p in asked), asked
            shot(browser, tmp_path / "dashboard-tiles.png")
            assert not browser.errors, browser.errors  # type: ignore[attr-defined]
        finally:
            srv.shutdown()
    finally:
        m.close_all()
