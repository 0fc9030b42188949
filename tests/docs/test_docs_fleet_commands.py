"""The docs' commands that need Ray (``<!-- run ray -->``): a Ray of this machine alone, as
``Fleet()`` starts it on a laptop, in a session of its own; everything of that session is
gone when the block ends (killed by pid otherwise, and the test fails)."""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import pytest
from docblocks import Block, all_blocks
from test_docs_commands import doc_environment, expect_exit, run_process

RAY = [b for b in all_blocks() if b.kind == "run" and "ray" in b.options]


@pytest.mark.parametrize("block", RAY, ids=[b.id for b in RAY])
def test_ray_block(block: Block, tmp_path, instances):
    pytest.importorskip("ray")
    assert block.lang in ("python", "py"), f"{block.id}: only python blocks run on Ray"
    ray_tmp = Path(tempfile.mkdtemp(prefix="rd-", dir="/tmp"))  # Ray's socket paths must stay short
    try:
        de = doc_environment(tmp_path, instances[:2])
        de.env.update(RAY_TMPDIR=str(ray_tmp), RAY_USE_RANDOM_PORTS="1")
        script = de.work / f"doc_{block.line}.py"
        script.write_text(block.text)
        expect_exit(block, run_process([sys.executable, str(script)], block, de.work, de.env))
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
