"""The CLI after the restructure (issue 19): every command, option and positional argument the
`sitlpool` command had before the move (recorded once from that code, in
cli_before_the_restructure.json) is still there; commands added since have tests of their own."""

import argparse
import json
from pathlib import Path

from sitlpool.cli import parser

BEFORE = json.loads((Path(__file__).parent / "cli_before_the_restructure.json").read_text())


def surface(p: argparse.ArgumentParser) -> dict:
    out: dict = {}

    def walk(pp: argparse.ArgumentParser, prefix: list[str]) -> None:
        opts = sorted(o for a in pp._actions for o in a.option_strings)
        pos = [a.dest for a in pp._actions if not a.option_strings and not isinstance(a, argparse._SubParsersAction)]
        out[" ".join(prefix) or "sitlpool"] = {"options": opts, "positionals": pos}
        for a in pp._actions:
            if isinstance(a, argparse._SubParsersAction):
                for name, sp in a.choices.items():
                    walk(sp, [*prefix, name])

    walk(p, [])
    return out


def test_every_command_and_option_is_as_it_was():
    now = surface(parser())
    assert set(BEFORE) <= set(now), sorted(set(BEFORE) - set(now))
    for command, was in BEFORE.items():
        assert set(was["options"]) <= set(now[command]["options"]), (
            command,
            set(was["options"]) - set(now[command]["options"]),
        )
        assert now[command]["positionals"] == was["positionals"], command
