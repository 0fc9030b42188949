"""docs/cli.md says what the CLI has: each option of `ab` and `watch` in its row, every `logs`
subcommand, and every top-level key of `sitlpool status --json` in its schema; the `status
--json` help points at that page (the schema is not in the README)."""

import argparse
import re
from pathlib import Path

import pytest

from sitlpool.cli import parser
from sitlpool.status import pool_status

PAGE = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()


def subparser(*names: str) -> argparse.ArgumentParser:
    p = parser()
    for name in names:
        action = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
        p = action.choices[name]
    return p


def row(command: str) -> str:
    return next(line for line in PAGE.splitlines() if line.startswith(f"| `sitlpool {command} "))


@pytest.mark.parametrize("command", ["ab", "watch"])
def test_every_option_is_in_the_commands_row(command):
    text = row(command)
    actions = [a for a in subparser(command)._actions if a.option_strings and "--help" not in a.option_strings]
    missing = [
        a.option_strings[-1]
        for a in actions
        if not any(re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])", text) for o in a.option_strings)
    ]
    assert not missing, f"docs/cli.md's `{command}` row lacks {missing}"


def test_every_logs_subcommand_is_listed():
    action = next(a for a in subparser("logs")._actions if isinstance(a, argparse._SubParsersAction))
    listed = re.search(r"`sitlpool logs ([^` ]+)", row("logs")).group(1).replace("\\|", "|").split("|")
    assert sorted(listed) == sorted(action.choices)


def test_status_json_keys_are_in_the_schema(env):
    schema = PAGE.split("`sitlpool status --json` prints")[1].split("```json")[1].split("```")[0]
    for key in pool_status(all_=True):
        assert f'"{key}"' in schema, f"docs/cli.md's status --json schema lacks {key!r}"


def test_status_json_help_names_the_page():
    help_text = next(a.help for a in subparser("status")._actions if "--json" in a.option_strings)
    assert "docs/cli.md" in help_text and "README" not in help_text
