"""The ``skalign`` command line: fit / translate / evaluate, typed --param, one-line errors."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from skalign import (
    AnchorBootstrapper,
    GeRAAligner,
    InverseRelativeProjector,
    LinearAligner,
    ProcrustesAligner,
)
from skalign.cli import CommandError, main, method_names, parse_param, resolve_method
from skalign.datasets import load_docstring_embeddings
from skalign.io import load, model_info
from skalign.metrics import mean_cosine_similarity, mean_reciprocal_rank, top_k_accuracy

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Real embeddings (vendored docstring subset): 600 known pairs, 300 held out."""
    d = tmp_path_factory.mktemp("cli")
    data = load_docstring_embeddings()
    A, B = data.embeddings["minilm_l6"], data.embeddings["mpnet_base"]
    for name, arr in {"a": A[:600], "b": B[:600], "x": A[600:900], "y": B[600:900]}.items():
        np.save(d / f"{name}.npy", arr)
    return d


def run(capsys, *argv):
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


# ---------------------------------------------------------------------- the must-show pipeline
def test_fit_translate_evaluate_equal_the_python_api(files, tmp_path, capsys):
    model = tmp_path / "m.skops"
    status, out, _ = run(capsys, "fit", "procrustes", "--source", files / "a.npy",
                         "--target", files / "b.npy", "-o", model)
    assert status == 0
    assert "fitted ProcrustesAligner() on 600 pairs: 384-d -> 768-d" in out
    assert "training cosine" in out and "saved" in out

    status, out, _ = run(capsys, "translate", model, files / "x.npy", tmp_path / "out.npy")
    assert status == 0 and "translated 300 rows 384-d -> 768-d" in out

    status, out, _ = run(capsys, "evaluate", model, "--source", files / "x.npy",
                         "--target", files / "y.npy", "--json")
    assert status == 0
    scores = json.loads(out)

    A, B = np.load(files / "a.npy"), np.load(files / "b.npy")
    X, Y = np.load(files / "x.npy"), np.load(files / "y.npy")
    est = ProcrustesAligner().fit(A, B)
    Y_hat = est.transform(X)
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), Y_hat, atol=1e-6, rtol=0)
    assert scores["n_pairs"] == 300
    assert scores["cosine"] == pytest.approx(mean_cosine_similarity(Y, Y_hat), abs=1e-6)
    assert scores["top1"] == pytest.approx(top_k_accuracy(Y, Y_hat), abs=1e-6)
    assert scores["top10"] == pytest.approx(top_k_accuracy(Y, Y_hat, k=10), abs=1e-6)
    assert scores["mrr"] == pytest.approx(mean_reciprocal_rank(Y, Y_hat), abs=1e-6)
    assert scores["top1"] > 0.9  # MiniLM -> MPNet by Procrustes on 600 real pairs

    status, out, _ = run(capsys, "evaluate", model, "--source", files / "x.npy",
                         "--target", files / "y.npy")
    assert status == 0 and out.splitlines()[0].split() == ["pairs", "cosine", "top-1",
                                                           "top-10", "MRR"]


@pytest.mark.filterwarnings("ignore:GeRAAligner. the optimisation did not converge")
def test_fit_with_params_and_unpaired_pools(files, tmp_path, capsys):
    model = tmp_path / "gera.skops"
    status, out, err = run(
        capsys, "fit", "GeRAAligner", "--source", files / "a.npy", "--target", files / "b.npy",
        "-o", model, "--param", "max_iter=2", "--param", "n_components=32",
        "--param", "random_state=0", "--param", "early_stopping=false",
        "--unpaired-source", files / "x.npy", "--unpaired-target", files / "y.npy",
    )
    assert status == 0, err
    assert "unpaired pool UnpairedPool(X: 300×384, y: 300×768)" in out
    est = load(model)
    assert isinstance(est, GeRAAligner) and est.max_iter == 2 and est.early_stopping is False
    assert est.n_unpaired_source_ == 300 and model_info(model)["n_features_out"] == 32
    # a shared-space model translates into its shared space
    status, _, _ = run(capsys, "translate", model, files / "x.npy", tmp_path / "z.npy")
    assert status == 0 and np.load(tmp_path / "z.npy").shape == (300, 32)


def test_fit_inner_estimator_params_from_the_command_line(files, tmp_path, capsys):
    """``OUTER__NAME=VALUE`` reaches the inner estimator, typed from its own constraints."""
    model = tmp_path / "boot.skops"
    status, out, err = run(
        capsys, "fit", "bootstrap", "--source", files / "a.npy", "--target", files / "b.npy",
        "-o", model, "--param", "estimator=linear", "--param", "estimator__alphas=0.01,0.1,1",
        "--param", "estimator__scoring=recall_retention", "--param", "map_rounds=1",
        "--param", "random_state=0",
        "--unpaired-source", files / "x.npy", "--unpaired-target", files / "y.npy",
    )
    assert status == 0, err
    est = load(model)
    assert isinstance(est.estimator_, LinearAligner) and est.map_rounds == 1
    assert est.estimator.scoring == "recall_retention"
    np.testing.assert_array_equal(est.estimator_.alphas, [0.01, 0.1, 1.0])
    assert est.estimator_.alpha_ in (0.01, 0.1, 1.0)


@pytest.mark.parametrize("items, match", [
    (["estimator__alpha=1"], "give the estimator first, e.g. --param estimator=linear"),
    (["estimator=linear", "estimator__alhpa=1"], "LinearAligner has no parameter 'alhpa'"),
    (["estimator=linear", "estimator__alpha=-1"], "alpha must be .*a float"),
    (["estimatr__alpha=1"], "AnchorBootstrapper has no parameter 'estimatr'"),
])
def test_inner_param_errors_are_one_line(files, tmp_path, capsys, items, match):
    argv = ["fit", "bootstrap", "--source", files / "a.npy", "--target", files / "b.npy",
            "-o", tmp_path / "m.skops"]
    for item in items:
        argv += ["--param", item]
    status, out, err = run(capsys, *argv)
    assert status == 2 and re.search(match, err) and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "m.skops").exists()


# --------------------------------------------------------------------------------- --param
def test_method_names_cover_every_estimator():
    from skalign.utils import all_estimators

    names = method_names()
    assert {"procrustes", "linear", "irp", "gera", "asif", "bootstrap", "ensemble"} <= set(names)
    assert set(names.values()) == {cls for _, cls in all_estimators()}
    assert resolve_method("IRP") is InverseRelativeProjector
    assert resolve_method("procrustesaligner") is ProcrustesAligner
    with pytest.raises(CommandError, match="unknown method 'pca'; choose one of asif, bootstrap"):
        resolve_method("pca")


@pytest.mark.parametrize("cls, item, expected", [
    (LinearAligner, "alpha=0.5", ("alpha", 0.5)),
    (LinearAligner, "alpha=1", ("alpha", 1.0)),
    (LinearAligner, "center=False", ("center", False)),
    (LinearAligner, "rtol=none", ("rtol", None)),
    (LinearAligner, "batch-size=4096", ("batch_size", 4096)),
    (InverseRelativeProjector, "n_subspaces=8", ("n_subspaces", 8)),
    (InverseRelativeProjector, "prune_on=source", ("prune_on", "source")),
    (InverseRelativeProjector, "random_state=3", ("random_state", 3)),
    (ProcrustesAligner, "device=cpu", ("device", "cpu")),
    (GeRAAligner, "bandwidth=median", ("bandwidth", "median")),
    (GeRAAligner, "bandwidth=0.5", ("bandwidth", 0.5)),
])
def test_param_typed_from_constraints(cls, item, expected):
    name, value = parse_param(cls, item)
    assert (name, value) == expected and type(value) is type(expected[1])


def test_param_meta_estimator_and_arrays():
    name, value = parse_param(AnchorBootstrapper, "estimator=linear")
    assert name == "estimator" and isinstance(value, LinearAligner)
    name, value = parse_param(AnchorBootstrapper, "anchor_indices=0,3,7")
    np.testing.assert_array_equal(value, [0, 3, 7])


@pytest.mark.parametrize("cls, item, match", [
    (LinearAligner, "alpha=-1", r"alpha must be .*a float in the range \[0.0, inf\)"),
    (LinearAligner, "alpha=abc", "alpha must be"),
    (LinearAligner, "alhpa=1", "has no parameter 'alhpa'; its parameters are alpha"),
    (LinearAligner, "alpha", "expects NAME=VALUE"),
    (InverseRelativeProjector, "n_subspaces=2.5", "n_subspaces must be an int"),
    (InverseRelativeProjector, "prune_on=both", "prune_on must be a str among"),
    (ProcrustesAligner, "center=maybe", "center must be true/false"),
])
def test_param_errors(cls, item, match):
    with pytest.raises(CommandError, match=match):
        parse_param(cls, item)


# ----------------------------------------------------------------------------------- errors
@pytest.fixture(scope="module")
def model_file(files, tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "m.skops"
    assert main(["fit", "linear", "--source", str(files / "a.npy"), "--target",
                 str(files / "b.npy"), "-o", str(path)]) == 0
    return path


@pytest.mark.parametrize("argv, match", [
    (["fit", "procrustez", "--source", "{a}", "--target", "{b}", "-o", "{out}/m.skops"],
     "unknown method 'procrustez'"),
    (["fit", "linear", "--source", "{a}", "--target", "{b}", "-o", "{out}/m.skops",
      "--param", "alpha=-2"], "alpha must be .*a float"),
    (["fit", "linear", "--source", "{out}/nope.npy", "--target", "{b}", "-o", "{out}/m.skops"],
     "nope.npy: no such file"),
    (["fit", "linear", "--source", "{a}", "--target", "{y}", "-o", "{out}/m.skops"],
     "has 600 rows but --target .* has 300"),
    (["fit", "procrustes", "--source", "{a}", "--target", "{b}", "-o", "{out}/m.skops",
      "--unpaired-source", "{x}"], "does not use unpaired embeddings"),
    (["translate", "{model}", "{y}", "{out}/o.npy"],
     "vectors have 768 dimensions but the model translates 384-d"),
    (["translate", "{a}", "{x}", "{out}/o.npy"], "not a skops model file"),
    (["translate", "{model}", "{x}", "{out}/o.csv"], "unsupported format"),
    (["translate", "{model}", "{x}", "{x}"], "OUTPUT is the same as INPUT"),
    (["translate", "{model}", "{x}", "{out}/o", "--column", "v", "--scheduler", "tcp://x:1"],
     "Parquet files or folders of shards only"),
    (["translate", "{model}", "{x}", "{out}/o.npy", "--device", "cuda:99"],
     "device='cuda:99' asks for CUDA"),
    (["translate", "{model}", "{x}", "{out}/o.npy", "--device", "gpu"],
     "device='gpu' is not a valid device"),
    (["evaluate", "{model}", "--source", "{x}", "--target", "{x}"],
     "has 384-d vectors but the model was fitted on 768-d targets"),
])
def test_errors_exit_2_with_one_line(files, model_file, tmp_path, capsys, argv, match):
    import re

    paths = {"a": files / "a.npy", "b": files / "b.npy", "x": files / "x.npy",
             "y": files / "y.npy", "out": tmp_path, "model": model_file}
    status, out, err = run(capsys, *[a.format(**paths) for a in argv])
    assert status == 2
    assert len(err.strip().splitlines()) == 1 and err.startswith(f"skalign {argv[0]}: error: ")
    assert re.search(match, err), err
    assert os.listdir(tmp_path) == []  # no model, no partial output, no temporaries


def test_translate_device_moves_a_model_fitted_elsewhere(files, tmp_path, capsys):
    """A model fitted on a GPU, translating on a machine without one: ``--device cpu`` moves
    it (no fallback warning) and the output is its CPU transform; without ``--device`` it falls
    back with a :class:`~skalign.exceptions.DeviceWarning`."""
    import warnings

    from skalign.exceptions import DeviceWarning
    from skalign.io import save

    A, B = np.load(files / "a.npy"), np.load(files / "b.npy")
    est = GeRAAligner(random_state=0).fit(A, B)
    est.device_ = "cuda:0"  # as unpickled from a GPU machine
    save(est, tmp_path / "gpu.skops")
    X = np.load(files / "x.npy")
    if not __import__("torch").cuda.is_available():
        with pytest.warns(DeviceWarning, match="computing on the CPU instead"):
            assert run(capsys, "translate", tmp_path / "gpu.skops", files / "x.npy",
                       tmp_path / "fallback.npy", "--quiet")[0] == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeviceWarning)
        status, out, _ = run(capsys, "translate", tmp_path / "gpu.skops", files / "x.npy",
                             tmp_path / "cpu.npy", "--device", "cpu")
    assert status == 0 and "translated 300 rows" in out
    est.device_ = "cpu"
    np.testing.assert_allclose(np.load(tmp_path / "cpu.npy"), est.transform(X), rtol=1e-5,
                               atol=1e-6)


def test_set_fitted_device_reaches_wrapped_models(files):
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import FunctionTransformer

    from skalign.cli._inverse import InverseModel
    from skalign.utils._backend import set_fitted_device

    A, B = np.load(files / "a.npy"), np.load(files / "b.npy")
    inner, other = ProcrustesAligner().fit(A, B), LinearAligner().fit(A, B)
    inner.device_ = other.device_ = "cuda:0"
    pipe = make_pipeline(FunctionTransformer(), inner)
    assert set_fitted_device([pipe, InverseModel(other)], "cpu") == 2
    assert inner.device_ == other.device_ == "cpu"
    assert set_fitted_device(FunctionTransformer().fit(A), "cpu") == 0


def test_console_entry_point_and_python_m(files, model_file, tmp_path):
    import tomllib

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"skalign": "skalign.cli:main"}
    # a real process: exit status 2, one line, no traceback
    proc = subprocess.run(
        [sys.executable, "-m", "skalign", "translate", str(model_file), str(files / "y.npy"),
         str(tmp_path / "o.npy")], capture_output=True, text=True, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert os.listdir(tmp_path) == []


def test_python_m_skalign_dispatch(monkeypatch):
    """``python -m skalign`` runs the demo unless a command is named; ``__main__`` only
    dispatches to the command line."""
    import skalign.demo as demo

    seen = []
    monkeypatch.setattr(demo, "demo_main", lambda argv: seen.append(("demo", argv)))
    monkeypatch.setattr("skalign.cli.cmd_fit", lambda args, out: seen.append(("fit",)) or 0)
    assert main([], default_command="demo") == 0
    assert main(["--anchors", "50"], default_command="demo") == 0
    assert main(["fit", "linear", "--source", "a.npy", "-o", "m.skops"],
                default_command="demo") == 0
    assert seen == [("demo", []), ("demo", ["--anchors", "50"]), ("fit",)]
    entry = (ROOT / "skalign" / "__main__.py").read_text()
    assert "from .cli import main" in entry and "def " not in entry


def test_skalign_demo_runs_the_demo(monkeypatch):
    import skalign.demo as demo

    seen = []
    monkeypatch.setattr(demo, "run_store_demo", lambda quick: seen.append(("store", quick)))
    monkeypatch.setattr(demo, "run_demo", lambda *args: seen.append(args))
    assert main(["demo", "--anchors", "50"]) == 0
    assert seen == [("store", False), ("mlp-a", "mlp-b", 50, 15)]



def test_bench_translate_quick(load_benchmark, tmp_path, capsys):
    bench = load_benchmark("bench_translate")
    results = bench.main(["--quick", "--workdir", str(tmp_path)])
    assert results["rows"] > 0 and results["cli_rows_per_s"] > 0 and results["floor_rows_per_s"] > 0
    assert results["max_abs_diff"] < 1e-5
    assert os.listdir(tmp_path) == []  # the benchmark removes its files


def test_fit_reports_the_normalize_decision(files, tmp_path, capsys):
    """Raw MiniLM against unit-norm targets: ``skalign fit`` says which side was normalised."""
    B = np.load(files / "b.npy")
    np.save(tmp_path / "b_unit.npy", B / np.linalg.norm(B, axis=1, keepdims=True))
    status, out, _ = run(capsys, "fit", "procrustes", "--source", files / "a.npy", "--target",
                         tmp_path / "b_unit.npy", "-o", tmp_path / "m.skops")
    assert status == 0
    assert "normalize: source (the source norms vary but the other side's are constant" in out
    status, out, _ = run(capsys, "fit", "procrustes", "--source", files / "a.npy", "--target",
                         files / "b.npy", "-o", tmp_path / "m2.skops")
    assert status == 0 and "normalize: none (both sides' norms vary" in out
