#!/usr/bin/env bash
# The GPU checks in one run, for a machine with a CUDA device: the CUDA tests (every test whose id
# names cuda: tests/test_cuda.py, the CUDA-marked tests and the CPU/CUDA-parametrised ones), then
# benchmarks/bench_cuda.py. Usage, from the repository root:
#
#     bash ci/run_cuda_checks.sh DOCSTRINGS_EN_NPZ OUT_DIR [bench_cuda.py options]
#
# Wheels in .whl/ (packages that machine lacks, e.g. skops) are installed into a scratch folder
# first. The pytest log and the benchmark's CSV files land in OUT_DIR.
set -uo pipefail
data=$1
out=$2
shift 2
mkdir -p "$out"
if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 SKALIGN_DATA=/tmp/skalign_data
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch, numpy, scipy, sklearn; print('torch', torch.__version__, 'numpy', \
numpy.__version__, 'scipy', scipy.__version__, 'scikit-learn', sklearn.__version__)"
python3 -m pytest -p no:cacheprovider -q -rfEs -k cuda \
    tests/test_cuda.py tests/test_base.py tests/test_baselines.py tests/test_ensemble.py \
    tests/test_gera.py tests/test_irp.py tests/test_numpy_path.py tests/test_metrics.py tests/test_cli.py \
    tests/test_bootstrap.py tests/test_facade.py 2>&1 | tee "$out/pytest_cuda.log"
echo "pytest exit status: ${PIPESTATUS[0]}"
python3 benchmarks/bench_cuda.py "$data" --out "$out" "$@" 2>&1 | tee "$out/bench_cuda.log"
