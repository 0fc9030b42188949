"""An unmanaged SITL's logs are its owner's: attached to and closed, nothing is moved and
nothing is recorded; its live log can still be found while it runs here."""

import os
import shutil
from pathlib import Path

from conftest import Gcs, start_sim
from sitlpool.instances import ports
from sitlpool.logs import LogStore
from sitlpool.process import UnmanagedManager

REAL_LOG = Path(__file__).resolve().parents[3] / "shared" / "logs" / "copter-hop.BIN"


def test_an_unmanaged_sitls_logs_are_never_moved(procs, env, data_dir, instances, tmp_path):
    n = instances[1]
    cwd = tmp_path / "theirs"
    (cwd / "logs").mkdir(parents=True)
    shutil.copy(REAL_LOG, cwd / "logs" / "00000002.BIN")
    (cwd / "logs" / "00000001.BIN").write_bytes(b"")
    (cwd / "logs" / "LASTLOG.TXT").write_text("2\r\n")
    before = sorted(os.listdir(cwd / "logs"))
    sim = start_sim(procs, cwd, n, "--speedup", 5)
    owner = Gcs(ports(n).serial0)  # its owner's GCS: a SITL opens SERIAL1/2 once SERIAL0 has a client
    owner.heartbeat()
    m = UnmanagedManager()
    h = m.start("theirs", instance=n)
    assert h.kept_logs == []
    assert h.current_log() == cwd / "logs" / "00000002.BIN", "its live log, read in place"
    h.kill(wait=True)
    assert h.dead and sim.poll() is None, "left running"
    owner.close()
    assert h.kept_logs == [] and h.current_log() is None
    assert sorted(os.listdir(cwd / "logs")) == before, "nothing moved"
    assert (cwd / "logs" / "00000002.BIN").read_bytes() == REAL_LOG.read_bytes()
    assert LogStore(data_dir).list() == [] and not (data_dir / "logs").exists(), "nothing recorded"
