"""Hostile pass 3 on launch parameters: a name that is no parameter name (a space, a newline, an
empty text) passes check_open_args and a batch variant's check, is written as a line of the
launch .parm file, and only the launched SITL says what is wrong: "exited with code 1 before it
was ready; ... sitlpool-launch.parm:2: 'NAME' is not a number" (two lines, naming a file the
caller never wrote), or, with a newline, the name injects a line of its own into the launch
file. A parameter file's names are checked (1-16 of A-Z, 0-9, _); given ones must be too,
before anything is leased or launched."""

from __future__ import annotations

import pytest

from sitlpool.batch import check_variants
from sitlpool.errors import SitlpoolError
from sitlpool.sessions import check_open_args

NAMES = {"space": "BAD NAME", "newline": "RTL_ALT 100\nFS_THR_ENABLE", "empty": ""}


@pytest.mark.parametrize("name", list(NAMES.values()), ids=list(NAMES))
def test_open_args_refuse_a_name_that_is_no_parameter_name(name):
    with pytest.raises(SitlpoolError) as e:
        check_open_args("quad", 1.0, params={name: 1})
    assert "parameter" in str(e.value) and "\n" not in str(e.value), str(e.value)


@pytest.mark.parametrize("name", [NAMES["space"], NAMES["newline"]], ids=["space", "newline"])
def test_a_batch_variant_refuses_a_name_that_is_no_parameter_name(name):
    with pytest.raises(SitlpoolError) as e:
        check_variants({"A": {"params": {name: 1}}, "B": {}})
    assert "parameter" in str(e.value) and "\n" not in str(e.value), str(e.value)
