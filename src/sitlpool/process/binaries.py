"""Which program is a SITL: the binary that flies a model, its defaults files, its command
line, and telling a running SITL from any other process (by its executable and arguments
as a whole, never by a substring of its command line)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from .. import procinfo
from ..errors import SitlpoolError
from ..sim.__main__ import MODELS as BUILTIN_MODELS  # the built-in vehicle's models (a plain set, no pymavlink)

REAL_MAX_INSTANCE = 255  # ArduPilot SITL keeps -I in 8 bits: `-I 300` binds instance 44's ports

# models -> the ArduPilot binary that flies them (SITL's --model names)
PLANE_MODELS = ("plane", "quadplane", "glider", "plane-", "quadplane-", "jsbsim", "last_letter", "plane-tailsitter")
ROVER_MODELS = ("rover", "boat", "sailboat", "balancebot", "motorboat")
COPTER_MODELS = frozenset(
    {
        "quad",
        "copter",
        "+",
        "x",
        "hexa",
        "octa",
        "octa-quad",
        "tri",
        "y6",
        "dodeca-hexa",
        "deca",
        "hexax",
        "octax",
        "quadplus",
        "quadx",
        "coaxcopter",
        "singlecopter",
        "cwx",
    }
)
#: the executables of ArduPilot's SITL vehicles
VEHICLE_BINARIES = frozenset(
    {"arducopter", "arducopter-heli", "arduplane", "ardurover", "ardusub", "antennatracker", "blimp"}
)
BUILTIN_MODULE = "sitlpool.sim"  # python -m sitlpool.sim
BUILTIN_SCRIPT = "sitlpool-sim"  # its console script
_PYTHON = re.compile(r"python(\d+(\.\d+)*)?")


def builtin_command() -> list[str]:
    return [sys.executable, "-m", BUILTIN_MODULE]


def runs_builtin(argv: list[str] | tuple[str, ...] | None) -> bool:
    """Does ``argv`` (an interpreter's) run the built-in vehicle as ``builtin_command`` starts it?"""
    return list((argv or [])[1:3]) == ["-m", BUILTIN_MODULE]


def binary_for_model(model: str) -> str | None:
    m = (model or "").lower()
    if m.startswith(("plane", "quadplane")) or m in PLANE_MODELS:
        return "arduplane"
    if m.startswith(ROVER_MODELS):
        return "ardurover"
    if m.startswith("heli"):
        return "arducopter-heli"
    if m in COPTER_MODELS:
        return "arducopter"
    return None


def resolve_binary(settings, model: str) -> Path | None:
    """The SITL binary that flies ``model`` under ``settings``: the configured one, or the
    vehicle binary of the model beside it in the same build (``model='plane'`` with
    ``.../bin/arducopter`` configured runs ``.../bin/arduplane``). Refuses what cannot fly
    it: the built-in vehicle is a copter only."""
    binary = settings.sitl_binary
    want = binary_for_model(model)
    if binary is None:
        if model.lower() not in BUILTIN_MODELS:
            kind = {"arduplane": "a plane", "ardurover": "a rover", "arducopter-heli": "a helicopter"}.get(
                want or "", ""
            )
            raise SitlpoolError(
                f"the built-in vehicle is a copter only ({', '.join(sorted(BUILTIN_MODELS))}); model {model!r}"
                + (f" is {kind} and" if kind else "")
                + " needs a real ArduPilot SITL: set SITLPOOL_SITL_BINARY "
                f"to {want or 'an ArduPilot SITL binary'} (e.g. <ardupilot>/build/sitl/bin/{want or 'arduplane'})"
            )
        return None
    binary = Path(binary)
    if want is None or binary.name not in VEHICLE_BINARIES or binary.name == want:
        return binary
    sibling = binary.parent / want
    if sibling.is_file():
        return sibling
    raise SitlpoolError(
        f"model {model!r} is flown by {want}, but the configured SITL binary is {binary} and there is "
        f"no {want} beside it; build it there or set SITLPOOL_SITL_BINARY to an {want}"
    )


#: a copter frame's files after copter.parm, as sim_vehicle.py's vehicleinfo.py lists them
COPTER_FRAME_FILES = {
    "x": ["copter-X.parm"],
    "quadx": ["copter-X.parm"],
    "hexa": ["copter-hexa.parm"],
    "octa": ["copter-octa.parm"],
    "octa-quad": ["copter-octaquad.parm"],
    "tri": ["copter-tri.parm"],
    "y6": ["copter-y6.parm"],
    "dodeca-hexa": ["copter-dodecahexa.parm"],
    "deca": ["copter-deca.parm"],
    "cwx": ["copter-cwx.parm"],
    "djix": ["copter-djix.parm"],
    "bfx": ["copter-bfx.parm"],
}
#: frames whose files replace copter.parm
COPTER_FRAME_BASE = {"singlecopter": ["copter-single.parm"], "coaxcopter": ["copter-single.parm", "copter-coax.parm"]}


def tree_of(binary: Path) -> Path | None:
    """The ArduPilot tree of a binary at ``<tree>/build/sitl/bin/<name>``, or None."""
    b = Path(binary).resolve()
    if b.parent.name != "bin" or b.parent.parent.name != "sitl" or b.parent.parent.parent.name != "build":
        return None
    return b.parents[3]


def tree_defaults(binary: Path, model: str) -> list[Path]:
    """The ArduPilot tree's default parameter files for a binary at ``<tree>/build/sitl/bin/<name>``:
    the vehicle's, then the frame's where the tree has one (``hexa``: copter.parm, copter-hexa.parm,
    as ``sim_vehicle.py -f hexa`` loads them)."""
    tree = tree_of(binary)
    if tree is None:
        return []
    name = Path(binary).resolve().name
    candidates = {
        "arducopter": ["Tools/autotest/default_params/copter.parm"],
        "arducopter-heli": ["Tools/autotest/default_params/copter-heli.parm"],
        "arduplane": ["Tools/autotest/models/plane.parm", "Tools/autotest/default_params/plane.parm"],
        "ardurover": ["Tools/autotest/default_params/rover.parm"],
        "ardusub": ["Tools/autotest/default_params/sub.parm"],
    }.get(name, [])
    base: list[Path] = []
    for rel in candidates:
        if (tree / rel).is_file():
            base = [tree / rel]
            break
    if name != "arducopter":
        return base
    frame = (model or "").lower()
    params_dir = tree / "Tools/autotest/default_params"
    if frame in COPTER_FRAME_BASE:
        files = [params_dir / f for f in COPTER_FRAME_BASE[frame]]
        if all(f.is_file() for f in files):
            return files
    extra = [params_dir / f for f in COPTER_FRAME_FILES.get(frame, [])]
    return base + [f for f in extra if f.is_file()] if base else base


def argv_instance(argv: list[str]) -> int | None:
    """The instance a SITL command line asks for (``-I N``, ``-IN``, ``--instance N``,
    ``--instance=N``; SITL's default is 0), or None if it is not a number."""
    n = "0"
    for i, a in enumerate(argv[1:], 1):
        if a in ("-I", "--instance"):
            n = argv[i + 1] if i + 1 < len(argv) else ""
        elif a.startswith("--instance="):
            n = a.partition("=")[2]
        elif a.startswith("-I"):
            n = a[2:]
    return int(n) if n.isascii() and n.isdigit() else None


def is_sitl_command(exe: str | None, argv: list[str]) -> bool:
    """Is a process with executable ``exe`` (its real path; None when it cannot be read, as
    for another user's process) and command line ``argv`` a SITL? Decided on the whole:
    - an ArduPilot vehicle binary: the executable is one (argv[0] when it cannot be read);
    - the built-in vehicle: a Python interpreter running exactly ``python -m sitlpool.sim ...``
      or the ``sitlpool-sim`` console script (``python .../sitlpool-sim ...``).
    Never a substring: ``nc -l 5763 sitlpool.sim`` or a ``python -c`` whose text names
    sitlpool.sim is not a SITL. (The process name in /proc/<pid>/comm is not used at all:
    any process can set it.)"""
    if not argv:
        return False
    program = Path(exe).name if exe else Path(argv[0]).name
    if program in VEHICLE_BINARIES:
        return True
    if not _PYTHON.fullmatch(program):
        return False
    if runs_builtin(argv):
        return True
    return len(argv) > 1 and Path(argv[1]).name == BUILTIN_SCRIPT


def is_sitl_process(pid: int) -> bool:
    """A running ArduPilot SITL binary or our built-in vehicle (see ``is_sitl_command``)."""
    if procinfo.state(pid) is None:
        return False
    return is_sitl_command(procinfo.exe(pid), procinfo.cmdline(pid))
