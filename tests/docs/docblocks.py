"""The commands shown in README.md and docs/*.md, as the doc tests read them.

A fenced block is acted on according to the HTML comment on the line just before it:

- ``<!-- run -->``: run it here (bash as one ``bash -e -o pipefail`` script, python as a
  script or, when it defines ``test_*`` functions, as a pytest file; a json MCP client
  configuration by connecting to the server it describes). Options after ``run``:
  ``exit=N`` (the exit status expected), ``cwd=checkout`` (run in the checkout: read-only
  checks), ``serve-http=PORT`` (run while ``sitlpool serve --http`` is up; PORT is replaced by
  a free port), ``ray`` (needs Ray: test_docs_fleet_commands.py runs it), ``pytest ARGS``
  (the arguments of a pytest file's run).
- ``<!-- parse -->``: it cannot run on a test machine (a real ArduPilot tree in the user's
  home, a Ray cluster's address, a program that runs until Ctrl-C): its sitlpool commands are
  parsed by the CLI's own parser, other known programs' options checked against their
  ``--help``, python compiled and its sitlpool imports resolved.

Every bash or python block must carry one of the two.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
COMMAND_LANGS = {"bash", "sh", "shell", "console", "python", "py"}

_FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
_MARKER = re.compile(r"^\s*<!--\s*(run|parse)\b(.*?)-->\s*$")


@dataclass
class Block:
    page: Path
    line: int  # 1-based line of the opening fence
    lang: str
    text: str
    kind: str | None  # "run", "parse" or None (no marker)
    options: dict[str, str] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return f"{self.page.name}:{self.line}"

    @property
    def is_pytest_file(self) -> bool:
        return self.lang in ("python", "py") and re.search(r"^def test_", self.text, re.M) is not None


def parse_marker(rest: str) -> dict[str, str]:
    """``exit=1 cwd=checkout serve-http=8765 ray pytest --sitl-speedup=10`` -> options."""
    opts: dict[str, str] = {}
    words = rest.split()
    while words:
        w = words.pop(0)
        if w == "pytest":
            opts["pytest"] = " ".join(words)
            break
        key, sep, value = w.partition("=")
        opts[key] = value if sep else ""
    return opts


def page_blocks(page: Path) -> list[Block]:
    lines = page.read_text().splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start, lang = i, m.group(2).lower()
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith("```"):
            j += 1
        marker = _MARKER.match(lines[start - 1]) if start > 0 else None
        out.append(
            Block(
                page=page,
                line=start + 1,
                lang=lang,
                text="\n".join(lines[start + 1 : j]) + "\n",
                kind=marker.group(1) if marker else None,
                options=parse_marker(marker.group(2)) if marker else {},
            )
        )
        i = j + 1
    return out


def all_blocks() -> list[Block]:
    return [b for p in PAGES for b in page_blocks(p)]


def command_lines(text: str) -> list[str]:
    """The logical lines of a shell block: continuations joined, blank and comment-only lines dropped."""
    out: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = pending + raw
        if line.rstrip().endswith("\\"):
            pending = line.rstrip()[:-1] + " "
            continue
        pending = ""
        if line.strip() and not line.strip().startswith("#"):
            out.append(line.strip())
    return out


def words(line: str) -> list[str]:
    """A command line's words, without its trailing comment and leading VAR=value assignments."""
    w = shlex.split(line, comments=True)
    while w and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", w[0]):
        w.pop(0)
    return w


def substitutions(line: str) -> list[str]:
    """The ``$(...)`` command substitutions of a line."""
    return re.findall(r"\$\(([^()]*)\)", line)


def for_this_machine(text: str, tmp: Path) -> str:
    """A setup recipe as its sitlpool part: no ``sudo``, no ``install -g GROUP``, system
    paths under ``tmp``; ``./dev demo`` is what ``./dev`` runs after its setup (``./dev``
    itself would install and byte-compile into the checkout); ``./dev test`` and
    ``./dev bench`` are checked by parse_dev, not run here (the suite cannot run itself)."""
    out = []
    for line in text.splitlines():
        s = line.lstrip()
        if s.startswith("sudo "):
            line = line.replace("sudo ", "", 1)
            s = line.lstrip()
        if s.startswith("install "):
            line = re.sub(r"\s-g\s+\S+", "", line)
        line = line.replace("/var/lib/", f"{tmp}/var/lib/")
        if s.startswith("./dev "):
            sub = s.split()[1]
            if sub in ("test", "bench"):
                line = ": checked by parse"
            elif sub == "demo":
                line = line.replace("./dev ", "sitlpool ", 1)
            else:
                line = line.replace("./dev ", "", 1)
        out.append(line)
    return "\n".join(out) + "\n"


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    out = set()
    fenced = False
    for line in page.read_text().splitlines():
        if line.strip().startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            out.add(slug(line.lstrip("#")))
    return out
