"""Step 3 of build.sh: train the distilled token vectors so that the mean of a text's token
vectors points where the teacher's sentence embedding points (Tokenlearn's idea), then reduce
them to 256 dimensions by PCA.

    python train.py DISTILLED_DIR FEATURES_DIR OUT_DIR [LR] [EPOCHS]

DISTILLED_DIR is model2vec's distillation without PCA (384 dims, the teacher's space), whose
vectors start the training. Texts are split into words the way the catalog splits them
(camelCase, snake_case, anything not a letter or digit), then into WordPiece tokens. Loss:
1 - cosine. Adam, batch 256, seed 0.
"""

import json
import os
import re
import shutil
import sys

import numpy as np
import torch
from safetensors.numpy import load_file, save_file
from tokenizers import Tokenizer


def words(text: str) -> str:
    text = re.sub(r"([a-z])([A-Z])", r"\1 \2", text)
    return " ".join(w for w in re.split(r"[^A-Za-z0-9]+", text.lower()) if w)


def main() -> None:
    src, features, out = sys.argv[1], sys.argv[2], sys.argv[3]
    lr = float(sys.argv[4]) if len(sys.argv) > 4 else 1e-3
    epochs = int(sys.argv[5]) if len(sys.argv) > 5 else 3
    torch.manual_seed(0)
    texts = json.load(open(f"{features}/texts.json"))
    targets = np.load(f"{features}/targets.npy")
    tok = Tokenizer.from_file(f"{src}/tokenizer.json")
    unk = tok.token_to_id("[UNK]")
    encoded = tok.encode_batch([words(t) for t in texts], add_special_tokens=False)
    ids = [[i for i in e.ids if i != unk][:64] for e in encoded]
    keep = [k for k, i in enumerate(ids) if i]
    ids = [ids[k] for k in keep]
    y = torch.tensor(targets[keep])
    start = load_file(f"{src}/model.safetensors")["embeddings"].astype(np.float32)
    bag = torch.nn.EmbeddingBag(*start.shape, mode="mean")
    bag.weight.data = torch.tensor(start)
    opt = torch.optim.Adam(bag.parameters(), lr=lr)
    n, batch = len(ids), 256
    for epoch in range(epochs):
        order = torch.randperm(n)
        total = 0.0
        for b in range(0, n, batch):
            idx = order[b : b + batch].tolist()
            flat = torch.tensor([t for k in idx for t in ids[k]])
            offsets = torch.tensor(np.cumsum([0] + [len(ids[k]) for k in idx[:-1]]))
            loss = (1 - torch.nn.functional.cosine_similarity(bag(flat, offsets), y[idx])).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item() * len(idx)
        print(f"epoch {epoch}: loss {total / n:.4f}", flush=True)
    w = bag.weight.data.numpy()
    _, _, vt = np.linalg.svd(w - w.mean(0), full_matrices=False)
    os.makedirs(out, exist_ok=True)
    shutil.copy(f"{src}/tokenizer.json", f"{out}/tokenizer.json")
    save_file({"embeddings": (w @ vt[:256].T).astype(np.float32)}, f"{out}/model.safetensors")


if __name__ == "__main__":
    main()
