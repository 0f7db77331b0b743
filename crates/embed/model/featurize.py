"""Step 2 of build.sh: the teacher's sentence embeddings of a corpus of software descriptions.

    python featurize.py TEACHER_DIR PYPI_TSV NPM_TSV COUNT OUT_DIR

The corpus is one-line package summaries (PyPI and npm listings, tab-separated with the summary
in the 5th / 4th column): 25 to 300 ASCII characters, deduplicated, shuffled with seed 0, the
first COUNT kept. They read like tool descriptions, which is what the model must understand.
Writes OUT_DIR/texts.json and OUT_DIR/targets.npy (unit vectors of all-MiniLM-L6-v2).
"""

import json
import random
import sys

import numpy as np
from sentence_transformers import SentenceTransformer


def summaries(path: str, column: int) -> set[str]:
    out = set()
    with open(path, encoding="utf-8", errors="ignore") as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) > column:
                s = parts[column].strip()
                if 25 <= len(s) <= 300 and s.isascii() and " " in s:
                    out.add(s)
    return out


def main() -> None:
    teacher, pypi, npm, count, out = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
    random.seed(0)
    texts = sorted(summaries(pypi, 4) | summaries(npm, 3))
    random.shuffle(texts)
    texts = texts[:count]
    model = SentenceTransformer(teacher, device="cpu")
    targets = model.encode(texts, batch_size=256, normalize_embeddings=True, show_progress_bar=False)
    json.dump(texts, open(f"{out}/texts.json", "w"))
    np.save(f"{out}/targets.npy", targets)
    print(f"{len(texts)} texts featurized")


if __name__ == "__main__":
    main()
