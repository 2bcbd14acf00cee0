"""One encode cache file shared by several handles and processes, some of them killed.

A cluster's workers share one cache file; the nanny restarts a killed worker, which opens the
file while the others write. Every open must wait out the others' locks, and no check skalign
makes on the file may release the locks SQLite holds on it.
"""

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

import numpy as np

from skalign.encoders import EncodeCache

_CLOSE_ONCE = ("import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); "
               "c.execute('SELECT count(*) FROM vectors').fetchone(); c.close()")


def test_a_second_handle_keeps_the_first_ones_locks(tmp_path):
    """Opening the cache a second time in the same process checks its files; the check must not
    drop the locks SQLite holds for the first handle (closing any descriptor of a file does):
    else another process's connection, closing, takes itself for the last one and deletes the
    log the first handle is writing to."""
    path = tmp_path / "c.sqlite"
    first = EncodeCache(path)
    first.put("fp", [b"a" * 32], np.ones((1, 4), np.float32))
    second = EncodeCache(path)
    subprocess.run([sys.executable, "-c", _CLOSE_ONCE, str(path)], check=True)
    assert (tmp_path / "c.sqlite-wal").exists() and (tmp_path / "c.sqlite-shm").exists()
    first.put("fp", [b"b" * 32], np.full((1, 4), 2, np.float32))
    second.put("fp", [b"c" * 32], np.full((1, 4), 3, np.float32))
    got = EncodeCache(path).get("fp", [b"a" * 32, b"b" * 32, b"c" * 32])
    assert sorted(float(v[0]) for v in got.values()) == [1.0, 2.0, 3.0]
    first.close()
    second.close()
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)


_WRITER = textwrap.dedent("""
    import os, sys
    import numpy as np
    from skalign.encoders import EncodeCache
    cache = EncodeCache(sys.argv[1])
    print("open", flush=True)
    while True:
        cache.put("fp", [os.urandom(32) for _ in range(200)], np.ones((200, 64), np.float32))
""")

_OPENER = textwrap.dedent("""
    import sys
    from skalign.encoders import EncodeCache
    for _ in range(25):
        cache = EncodeCache(sys.argv[1])
        cache.get("fp", [b"x" * 32])
        cache.close()
""")


def test_opens_beside_writers_killed_mid_write_all_succeed(tmp_path):
    """Writers are killed while they write and another starts (a cluster's worker restarted by
    its nanny) while three processes open and close the cache over and over: every open
    succeeds, and the file is a sound SQLite database after."""
    path = str(tmp_path / "c.sqlite")
    EncodeCache(path).close()
    writers = [subprocess.Popen([sys.executable, "-c", _WRITER, path], stdout=subprocess.PIPE,
                                text=True) for _ in range(2)]
    for w in writers:
        assert w.stdout.readline() == "open\n"
    time.sleep(0.3)
    openers = [subprocess.Popen([sys.executable, "-c", _OPENER, path], stderr=subprocess.PIPE,
                                text=True) for _ in range(3)]
    time.sleep(0.5)
    for w in writers:
        w.send_signal(signal.SIGKILL)
        w.wait()
    restarted = subprocess.Popen([sys.executable, "-c", _WRITER, path], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
    try:
        for o in openers:
            _, err = o.communicate(timeout=240)
            assert o.returncode == 0, err
        assert restarted.stdout.readline() == "open\n", restarted.stderr.read()
    finally:
        restarted.kill()
        restarted.wait()
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert os.stat(path).st_mode & 0o077 == 0
