"""``python -m skalign``: the README's demo runs and its table says what the README promises."""

from skalign.__main__ import main, run_demo


def test_demo_table_on_digits():
    lines = []
    rows = {r[0]: r for r in run_demo(out=lines.append)}
    acc = {name: r[5] for name, r in rows.items()}
    assert acc["B's own embeddings"] > 0.95
    assert acc["no alignment (raw A)"] < 0.35  # same width, unrelated coordinates: near chance
    for name in ["Procrustes", "Linear (ridge 1e-2)", "IRP (no training)", "Bootstrap 15 -> IRP"]:
        assert acc[name] > 0.93, (name, acc[name])
    # 15 known pairs + unpaired pools reach what IRP reaches with 300 known pairs
    assert rows["Bootstrap 15 -> IRP"][2] > rows["IRP (no training)"][2] - 0.01
    assert rows["Bootstrap 15 -> IRP"][1] == 15
    assert len(lines) == 2 + len(rows) and "stitched acc" in lines[1]


def test_demo_command_line(capsys):
    main(["--source", "mlp-a", "--target", "mlp-wide", "--anchors", "200", "--seed-pairs", "20"])
    out = capsys.readouterr().out
    assert "mlp-a -> mlp-wide" in out and "Bootstrap 20 -> IRP" in out
    assert "no alignment" not in out  # different widths: the raw stitch is impossible
