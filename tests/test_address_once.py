"""Every store address a command takes is parsed once, at the edge (``skalign.cli``), and
passed down as the parsed :class:`~skalign._stores.address.Address`; messages show it masked."""

from collections import Counter

import numpy as np
import pytest

from skalign import ProcrustesAligner
from skalign._stores import address as address_module
from skalign.cli import main
from skalign.io import save


@pytest.fixture
def counted(monkeypatch):
    calls = Counter()
    parse = address_module._parse_text

    def counting(text, output):
        calls[text] += 1
        return parse(text, output)

    monkeypatch.setattr(address_module, "_parse_text", counting)
    return calls


@pytest.fixture
def files(tmp_path):
    rng = np.random.default_rng(0)
    A = rng.standard_normal((120, 8)).astype(np.float32)
    B = A @ np.linalg.qr(rng.standard_normal((8, 8)))[0].astype(np.float32)
    np.save(tmp_path / "a.npy", A)
    np.save(tmp_path / "b.npy", B)
    save(ProcrustesAligner().fit(A, B), tmp_path / "m.skops")
    return tmp_path


@pytest.mark.parametrize("replace", [False, True])
def test_translate_parses_each_address_once(files, counted, capsys, replace):
    src, out = str(files / "a.npy"), str(files / "out.npy")
    argv = ["translate", str(files / "m.skops"), src, out, "--quiet"]
    if replace:
        assert main(argv) == 0
        counted.clear()
        argv += ["--replace", "--force"]
    assert main(argv) == 0, capsys.readouterr().err
    assert counted == Counter({src: 1, out: 1})


def test_fit_evaluate_restore_info_parse_once(files, counted, capsys):
    a, b = str(files / "a.npy"), str(files / "b.npy")
    assert main(["fit", "procrustes", "--source", a, "--target", b, "-o",
                 str(files / "m2.skops")]) == 0
    assert counted == Counter({a: 1, b: 1})
    counted.clear()
    assert main(["evaluate", str(files / "m2.skops"), "--source", a, "--target", b]) == 0
    assert counted == Counter({a: 1, b: 1})
    out = str(files / "o.npy")
    assert main(["translate", str(files / "m2.skops"), a, out, "--quiet"]) == 0
    counted.clear()
    assert main(["info", out]) == 0
    assert "translated by skalign" in capsys.readouterr().out
    assert counted == Counter({out: 1})
    counted.clear()
    assert main(["translate", str(files / "m2.skops"), a, out, "--replace", "--force",
                 "--quiet"]) == 0
    counted.clear()
    assert main(["restore", out]) == 0
    assert counted == Counter({out: 1})


def test_password_never_printed_on_errors(files, capsys):
    """An unreachable server: the one-line error shows the address masked, wherever the
    password was given."""
    secret = "s3cr3t-PaSS"
    for address in (f"postgresql://me:{secret}@127.0.0.1:1/db?table=t",
                    f"postgresql://me@127.0.0.1:1/db?table=t&password={secret}"):
        for argv in (["translate", str(files / "m.skops"), address, address + "_out"],
                     ["fit", "procrustes", "--source", address, "--target",
                      str(files / "b.npy"), "-o", str(files / "x.skops")],
                     ["evaluate", str(files / "m.skops"), "--source", address, "--target",
                      str(files / "b.npy")],
                     ["restore", address], ["info", address]):
            status = main(argv)
            captured = capsys.readouterr()
            assert status == 2, (argv, captured)
            assert secret not in captured.out + captured.err
            assert len(captured.err.strip().splitlines()) == 1, captured.err
            assert "***" in captured.err or "me@" in captured.err


def test_address_repr_and_identity_hide_the_password():
    a = address_module.parse_address("postgresql://me:pw1234@h:5432/db?table=s.t&column=v")
    b = address_module.parse_address("postgresql://me@h/db?table=s.t&column=v&password=x9876")
    assert "pw1234" not in repr(a) + str(a) + repr(a.identity)
    assert "x9876" not in repr(b) + str(b) + repr(b.identity)
    assert a.identity == b.identity
    assert "pw1234" in a.conninfo
