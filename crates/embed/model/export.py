"""Write a Model2Vec model folder as the flat file cem-embed reads (see src/format.rs).

    python export.py MODEL_DIR OUT.bin NAME

MODEL_DIR is what model2vec's `save_pretrained` writes (model.safetensors with one
`embeddings` matrix, tokenizer.json with a WordPiece vocabulary). Each row is quantized to
signed 8 bits with its own scale (max |value| / 127). Needs numpy and safetensors.
"""

import json
import struct
import sys

import numpy as np
from safetensors.numpy import load_file


def main() -> None:
    model_dir, out, name = sys.argv[1], sys.argv[2], sys.argv[3]
    matrix = load_file(f"{model_dir}/model.safetensors")["embeddings"].astype(np.float32)
    tokenizer = json.load(open(f"{model_dir}/tokenizer.json", encoding="utf-8"))
    if tokenizer["model"]["type"] != "WordPiece":
        sys.exit(f"{model_dir}: a {tokenizer['model']['type']} tokenizer; only WordPiece is read")
    vocab = tokenizer["model"]["vocab"]
    tokens = [None] * len(vocab)
    for token, index in vocab.items():
        tokens[index] = token
    if any(t is None for t in tokens) or len(tokens) != matrix.shape[0]:
        sys.exit(f"{model_dir}: {len(tokens)} tokens for {matrix.shape[0]} vectors")
    if any("\n" in t for t in tokens):
        sys.exit(f"{model_dir}: a token holds a newline")
    scales = np.abs(matrix).max(axis=1) / 127.0
    scales[scales == 0] = 1.0
    rows = np.clip(np.rint(matrix / scales[:, None]), -127, 127).astype(np.int8)
    vocab_bytes = "".join(t + "\n" for t in tokens).encode("utf-8")
    name_bytes = name.encode("utf-8")
    with open(out, "wb") as f:
        f.write(b"CEMEMB01")
        f.write(struct.pack("<I", len(name_bytes)))
        f.write(name_bytes)
        f.write(struct.pack("<III", matrix.shape[1], len(tokens), len(vocab_bytes)))
        f.write(vocab_bytes)
        f.write(scales.astype("<f4").tobytes())
        f.write(rows.tobytes())
    print(f"{out}: {len(tokens)} tokens x {matrix.shape[1]} dims")


if __name__ == "__main__":
    main()
