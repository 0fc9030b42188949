"""What the vehicle's sensors and checks say: pre-arm failures as ArduCopter words them,
SYS_STATUS health bits and EKF flags on real SITL's boot timeline, the compass declination,
the battery."""

from __future__ import annotations

from .geo import declination
from .rules import A
from .state import VehicleState


class Sensors(VehicleState):
    def prearm_failures(self) -> list[str]:
        """Why ArduCopter would refuse to arm now (empty: it would not), as its checks word it."""
        if self.p.get("ARMING_CHECK", 1) == 0:
            return []
        t = self.t
        e = self.events
        if self.booting or t < min(1.0, e[0][0]):
            return ["System not initialised"]
        if t < e[0][0]:
            return ["Accels inconsistent", "EKF attitude is bad", "AHRS: not using configured AHRS type"]
        if t < e[0][0] + (e[6][0] - e[0][0]) * 0.5:
            return ["Accels inconsistent"]
        if not self.reached(6):
            return ["Gyros inconsistent"]
        return []

    def battery_remaining(self) -> int:
        cap = max(1.0, self.p.get("BATT_CAPACITY", 3300))
        return max(0, int(round(100 * (1 - self.consumed_mah / cap))))

    def health(self) -> tuple[int, int, int]:
        """SYS_STATUS present/enabled/health bits as ArduCopter SITL sets them on this timeline."""
        present, enabled, health = 0x5371FC0F, 0x52419C0F, 0x47519C0F
        if self.gps_detected:
            present, enabled, health = present | 0x20, enabled | 0x20, health | 0x20
        if self.reached(5):
            enabled, health = enabled | 0x200000, health | 0x200000
        if not self.prearm_failures() and not (self.p.get("ARMING_CHECK", 1) and not self.reached(6)):
            health |= A.MAV_SYS_STATUS_PREARM_CHECK
        extra = self.enabled_extra
        return present, enabled | extra, (health | extra) & ~self.health_lost

    def ekf_flags(self) -> int:
        e = self.events
        if self.reached(7):
            flags = (0x33F if self.ekf_pos_ok else 0x25) | self.ekf_extra
            return flags & ~A.EKF_POS_VERT_ABS if self.baro_lost else flags
        if self.t >= e[2][0] + 0.25:
            return 0xA7
        if self.t >= e[1][0]:
            return 0
        return 0x400

    def auto_declination(self) -> None:
        """As ArduCopter's compass (COMPASS_AUTODEC=1): once it has a position (its first GPS
        fix) it sets COMPASS_DEC from where it is, in RAM only (not saved, no PARAM_VALUE sent),
        overwriting a value the user saved. COMPASS_AUTODEC=0 leaves COMPASS_DEC alone; like
        ArduCopter it is retried each step, so AUTODEC set to 1 later in the boot still applies."""
        if not (self.p.get("COMPASS_AUTODEC", 1) and self.p.get("COMPASS_ENABLE", 1)):
            return
        self.declination_set = True
        dec = declination(*self.latlon())
        if dec is not None:
            self.p.set_in_ram({"COMPASS_DEC": dec})

    def system_status(self) -> int:
        if self.booting:
            return A.MAV_STATE_BOOT
        return A.MAV_STATE_ACTIVE if self.armed else A.MAV_STATE_STANDBY

    def voltage(self) -> float:
        # real SITL's battery (SIM_BATT_CAP_AH 0) holds SIM_BATT_VOLTAGE: it never reaches a
        # low-voltage failsafe, however long one flies; remaining % follows the mAh drawn
        return self.p.get("SIM_BATT_VOLTAGE", 12.6)

    def current(self) -> float:
        return 25.0 if self.flying else (1.0 if self.armed else 0.0)
