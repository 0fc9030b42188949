"""Missions as AP_Mission keeps and runs them: item 0 is home; AUTO runs one navigation
command at a time and, beside it, the do / condition commands that follow it (AP_Mission's
advance_current_nav_cmd / advance_current_do_cmd), follows DO_JUMPs counting their repeats,
reports MISSION_CURRENT, MISSION_ITEM_REACHED and its texts as ArduCopter 4.7 does (measured).
What each command does: ``mission_cmds.py``."""

from __future__ import annotations

from .mission_cmds import MissionCommands
from .rules import CMD_NAMES, MODE_NAMES, A, mavlink
from .state import MissionItem

# AP_Mission::Mission_Command::type(): the names its "Mission: N NAME" texts use
NAMES = {
    **CMD_NAMES,
    17: "LoitUnlim",
    30: "ContinueAndChangeAlt",
    31: "LoitAltitude",
    83: "AltitudeWait",
    84: "VTOLTakeoff",
    85: "VTOLLand",
    92: "GuidedEnable",
    93: "Delay",
    94: "PayloadPlace",
    112: "CondDelay",
    114: "CondDist",
    179: "SetHome",
    181: "SetRelay",
    182: "RepeatRelay",
    183: "SetServo",
    184: "RepeatServo",
    189: "LandStart",
    195: "SetROILocation",
    197: "SetROINone",
    203: "DigiCamCtrl",
    205: "MountControl",
    206: "SetCamTrigDst",
    207: "FenceEnable",
    208: "Parachute",
    210: "InvertedFlight",
    211: "Gripper",
    212: "AutoTuneEnable",
    213: "SetYawSpd",
    215: "SetRepeatDist",
    216: "Sprayer",
    217: "SendScriptMessage",
    218: "AuxFunction",
    222: "GuidedLimits",
    223: "EngineControl",
    600: "JumpTag",
    601: "DoJumpTag",
    42600: "Winch",
}
JUMP_FOREVER = -1
MAX_JUMP_LOOPS = 64  # AP_Mission::get_next_cmd's guard


def is_nav(c: int) -> bool:
    """AP_Mission::is_nav_cmd."""
    return c <= 95 or c in (213, 42702, 42703)


class MissionRunner(MissionCommands):
    do_idx: int | None = None  # the do command AP_Mission runs now (or ran last)
    do_loaded = False
    do_all_done = False
    jump_runs: dict[int, int] | None = None  # DO_JUMP index -> times it has jumped
    reached_now: int | None = None
    current_changed = False  # MISSION_CURRENT to send at the end of the step
    restart_pending = False  # MISSION_START entered AUTO: the mission starts twice (commands.py)

    def _auto(self, vh, ah, vup, vdn, az) -> tuple[float, float, float] | None:
        """One step of AUTO as AP_Mission::update: load the navigation command at
        ``mission_seq`` if it is not running, fly it; when it is done, report it and load the
        next; then start or check the do command. At the mission's end the vehicle holds (or
        stays landed). ArduCopter sends one MISSION_ITEM_REACHED per step: the last."""
        if self.mission_done or self.paused:
            return None
        self.reached_now = None
        self.current_changed = False
        own = self.held_texts is None
        if own:  # ArduCopter's MISSION_ITEM_REACHED goes out before the step's texts, MISSION_CURRENT after
            self.held_texts = []
        try:
            return self._auto_step(vh, ah, vup, vdn, az)
        finally:
            if self.reached_now is not None:
                self.send(mavlink.MAVLink_mission_item_reached_message(self.reached_now))
            if own:
                held, self.held_texts = self.held_texts or [], None
                for severity, text in held:
                    self.text(severity, text)
            if self.current_changed:
                self.send(self.mission_current())

    def _auto_step(self, vh, ah, vup, vdn, az) -> tuple[float, float, float] | None:
        want = None
        seq = self.mission_seq
        changed = self.nav is None or not 0 < seq < len(self.mission) or self.nav.get("item") != self.mission[seq]
        if self.started_seq != seq or changed:  # not started, or the mission changed under it: (re)start
            if self.started_seq == -1:  # AUTO (re)entered: ModeAuto::init drops the ROI
                self.roi = self.fixed_yaw = self.leg = None
                self.speed_up_override = self.speed_dn_override = None
                if self.mission_seq <= 1:
                    self.jump_runs = {}  # a mission started from its beginning counts its jumps anew
            start = max(1, self.mission_seq)
            ok = self._advance_nav(start)
            if ok and self.restart_pending:
                if start <= 1:
                    self.jump_runs = {}
                ok = self._advance_nav(start)
            self.restart_pending = False
        else:
            ok = True
        if ok:
            want = self.nav_run(self.mission[self.mission_seq], vh, ah, vup, vdn, az)
            if want is None:
                self._nav_reached()
                ok = self._advance_nav(self.mission_seq + 1)
                if ok:
                    want = self.nav_run(self.mission[self.mission_seq], vh, ah, vup, vdn, az)
        if ok:
            self._do_step()
        self.auto_yaw()
        if not ok:
            self._complete()
            self.current_changed = True
            return None
        return want

    def _nav_reached(self) -> None:
        seq = self.mission_seq
        c = self.mission[seq].command
        self.notify("on_mission_item", seq, "reached")
        if c != A.MAV_CMD_NAV_LOITER_TO_ALT:  # (measured: ArduCopter 4.7 reports no LOITER_TO_ALT)
            self.reached_now = seq
        self.rtl_phase = ""
        self.auto_landing = False

    def _announce(self, seq: int) -> None:
        c = self.mission[seq].command
        self.text(A.MAV_SEVERITY_INFO, f"Mission: {seq} {NAMES.get(c, '?')}")
        self.notify("on_mission_item", seq, "started")

    def _advance_nav(self, start: int) -> bool:
        """AP_Mission::advance_current_nav_cmd from item ``start``: the first do command met is
        started, the first navigation command that starts becomes the current one."""
        self.do_idx, self.do_loaded, self.do_all_done = None, False, False
        i = start
        for _ in range(255):
            j = self._next_cmd(i, True)
            if j is None:
                return False
            c = self.mission[j].command
            if is_nav(c):
                self.mission_seq = self.started_seq = j
                self._announce(j)
                if self._start_nav(j):
                    if not self.do_loaded:
                        self.do_all_done = True
                    self.current_changed = True
                    return True
            elif not self.do_loaded:
                self.do_idx, self.do_loaded = j, True
                self._announce(j)
                self.do_start(j)
            i = j + 1
        return False

    def _start_nav(self, seq: int) -> bool:
        c = self.mission[seq].command
        self.hold_until = None
        if c == A.MAV_CMD_NAV_RETURN_TO_LAUNCH:
            self.rtl_phase = "climb"
        return self.nav_start(seq)

    def _next_cmd(self, i: int, count: bool) -> int | None:
        """AP_Mission::get_next_cmd: the first command at or after ``i`` that is not a DO_JUMP,
        following the jumps (``count``: this is the navigation search, which counts them)."""
        runs = self.jump_runs if self.jump_runs is not None else {}
        self.jump_runs = runs
        first_jump = None
        loops = MAX_JUMP_LOOPS
        while i < len(self.mission):
            it = self.mission[i]
            if it.command != A.MAV_CMD_DO_JUMP:
                return i
            loops -= 1
            target, times = int(it.params[0]), int(it.params[1])
            if loops < 0 or not 0 < target < len(self.mission):
                return None
            if not count and first_jump == i:
                return None
            first_jump = i if first_jump is None else first_jump
            if times == JUMP_FOREVER:
                i = target
            elif runs.get(i, 0) < times:
                if count:
                    runs[i] = runs.get(i, 0) + 1
                    self.text(A.MAV_SEVERITY_INFO, f"Mission: {i} Jump {runs[i]}/{times}")
                i = target
            else:
                i += 1
        return None

    def _do_step(self) -> None:
        """AP_Mission::update's do part: start the next do command, or check the running one."""
        if not self.do_loaded:
            if self.do_all_done:
                return
            start = 1 if self.do_idx is None else self.do_idx + 1
            j = self._next_cmd(start, False) if start < len(self.mission) else None
            if j is None or is_nav(self.mission[j].command):
                self.do_all_done = True
                return
            self.do_idx, self.do_loaded = j, True
            self._announce(j)
            self.do_start(j)
            return
        seq = self.do_idx
        if seq is not None and seq < len(self.mission) and self.do_verify(seq):
            self.do_loaded = False
            if self.copter_verifies(self.mission[seq].command):
                self.reached_now = seq

    def _complete(self) -> None:
        self.mission_done = True
        self.mission_seq = 0  # ArduCopter reports a finished mission as seq 0, state COMPLETE

    def mission_current(self):
        count = len(self.mission)
        if count <= 1:
            state = A.MISSION_STATE_NO_MISSION
        elif self.mission_done:
            state = A.MISSION_STATE_COMPLETE
        elif MODE_NAMES.get(self.mode) == "AUTO" and self.mission_started:
            state = A.MISSION_STATE_ACTIVE
        elif self.mission_started and MODE_NAMES.get(self.mode) == "AUTO":
            state = A.MISSION_STATE_PAUSED
        else:
            state = A.MISSION_STATE_NOT_STARTED
        return mavlink.MAVLink_mission_current_message(
            self.mission_seq, max(0, count - 1), state, int(MODE_NAMES.get(self.mode) == "AUTO")
        )

    def set_mission(self, items: list[MissionItem]) -> None:
        self.mission = items
        self.nav, self.jump_runs = None, None
        self.mission_seq = 1 if len(items) > 1 else 0
        self.mission_started = self.mission_done = False
        self.p.save_mission([it.row() for it in items])
        self.notify("on_mission", list(items))

    def store_item(self, seq: int, item: MissionItem) -> None:
        """One uploaded item written as it arrives, as AP_Mission does: it replaces item ``seq``
        or, one past the end, is added; where AUTO is in the mission stays."""
        if seq < len(self.mission):
            self.mission[seq] = item
        else:
            self.mission.append(item)
        self._stored()

    def truncate_mission(self, count: int) -> None:
        """An upload of ``count`` items begins: AP_Mission drops the items beyond it at once."""
        if count < len(self.mission):
            del self.mission[count:]
            self.mission_seq = min(self.mission_seq, max(0, len(self.mission) - 1))
            self._stored()

    def _stored(self) -> None:
        self.p.save_mission([it.row() for it in self.mission])
        self.notify("on_mission", list(self.mission))

    def set_home_here(self) -> None:
        self.home_n, self.home_e, self.home_up = self.north, self.east, self.alt
        self.home_set = True
        self.home_changed()

    def home_changed(self) -> None:
        """Home was (re)written: as AP_Mission, an empty mission gains item 0 (home); every GCS hears."""
        if not self.mission:
            self.mission = [MissionItem(A.MAV_CMD_NAV_WAYPOINT, 0.0, 0.0, 0.0, frame=A.MAV_FRAME_GLOBAL)]
            self.p.save_mission([it.row() for it in self.mission])
            self.notify("on_mission", list(self.mission))
        self.notify("on_home")
        self.on_home()
