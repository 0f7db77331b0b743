"""Measures a transformer embedding model on the search evaluation, the way the catalog ranks.

    cargo run -p cem-catalog --example search_eval_export > eval.json
    python3 compare.py eval.json MODEL_DIR [--query-prefix TEXT] [--doc-prefix TEXT]

MODEL_DIR is a sentence-transformers directory of a BERT- or MPNet-family model (config.json,
model.safetensors, tokenizer.json, and 1_Pooling/config.json for CLS pooling). Needs numpy,
safetensors and tokenizers. The forward pass is plain numpy, one text at a time: slow, but with no
torch and nothing downloaded.

    python3 compare.py --learning-bound MODEL_DIR

It prints top-1, top-3 and MRR for the 265 paraphrased needs and the 36 named ones, by cosine
alone and by the catalog's hybrid score with this model in place of the built-in static one
(crates/catalog/src/index.rs: LEXICAL_SHARE, SERVER_WEIGHT, MIN_COSINE). The built-in model's
own figures come from `cargo test -p cem-catalog --test search_eval -- --nocapture`.

With --learning-bound it prints instead what learning from use could reach with this model at best:
the needs of one half (by line parity) recorded in their first phrasing (`needs.jsonl`), the same needs
searched in their second (`paraphrases.jsonl`), only the recorded tools ranked, each by the cosine of its
closest record, as if the search knew which queries repeat a recorded need. Then the halves swap. The
evaluation prints the same for the built-in model ("nearest record alone").

    python3 compare.py eval.json MODEL_DIR --learning

With --learning it runs the whole of learning from use (crates/catalog/src/index.rs, `learned_boosts`:
records matched by words, by meaning as a soft nearest neighbour against "none of them" at a floor,
and the recorded tools' vectors moved toward their records, `shifted`) over the catalog's hybrid
ranking, once with the built-in model (the export's vectors and scores) and once with this model in
its place, for floors of "none of them" from 0.45 to 0.75, each with the tools moved and without
(MODEL_DIR `builtin` runs the built-in model's rows alone, in a few seconds): the same needs
recorded in one phrasing and searched in the other (top-1 and top-3), beside the needs whose tools
nobody used (what the records cost them). It leaves out what moves few needs: the named-first rule,
deprecated tools, keeping the tool words rank first in the first three, and mending misspellings;
at the shipped setting it lands within a point or two of the evaluation. A floor buys needs asked
again at the price of needs nobody asked yet; the question is whether a model moves that trade.
"""
import argparse
import json
import math
import os
import time

import numpy as np
from safetensors.numpy import load_file
from tokenizers import Tokenizer

LEXICAL_SHARE, SERVER_WEIGHT, MIN_COSINE = 0.1, 0.6, 0.15


def erf(x):
    """Abramowitz and Stegun 7.1.26 (error under 1.5e-7): numpy has no erf, and GELU needs it."""
    t = 1 / (1 + 0.3275911 * np.abs(x))
    y = 1 - t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429)))) * np.exp(-x * x)
    return np.sign(x) * y


class Encoder:
    """A BERT or MPNet encoder with mean or CLS pooling; unit vectors out."""

    def __init__(self, d):
        self.cfg = json.load(open(os.path.join(d, "config.json")))
        raw = load_file(os.path.join(d, "model.safetensors"))
        self.w = {k.split(".", 1)[1] if k.startswith(("bert.", "mpnet.", "model.")) else k: v.astype(np.float32)
                  for k, v in raw.items()}
        self.mpnet = self.cfg.get("model_type") == "mpnet"
        self.eps = self.cfg.get("layer_norm_eps", 1e-12)
        self.tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
        self.tok.no_padding()
        self.tok.enable_truncation(min(512, self.cfg.get("max_position_embeddings", 512) - 2))
        pooling = os.path.join(d, "1_Pooling", "config.json")
        self.cls = os.path.exists(pooling) and json.load(open(pooling)).get("pooling_mode_cls_token", False)

    def _ln(self, x, k):
        m = x.mean(-1, keepdims=True)
        v = ((x - m) ** 2).mean(-1, keepdims=True)
        return (x - m) / np.sqrt(v + self.eps) * self.w[k + ".weight"] + self.w[k + ".bias"]

    def _lin(self, x, k):
        return x @ self.w[k + ".weight"].T + self.w[k + ".bias"]

    def _relative_bias(self, n):
        # MPNet's bucketed relative positions (32 buckets, bidirectional, max distance 128).
        rel = np.arange(n)[None, :] - np.arange(n)[:, None]
        buckets, exact = 16, 8
        base = (rel > 0).astype(np.int64) * buckets
        a = np.abs(rel)
        far = exact + (np.log(np.maximum(a, 1) / exact) / math.log(128 / exact) * (buckets - exact)).astype(np.int64)
        b = base + np.where(a < exact, a, np.minimum(far, buckets - 1))
        return self.w["encoder.relative_attention_bias.weight"][b].transpose(2, 0, 1)

    def embed(self, text):
        ids = np.array(self.tok.encode(text).ids)
        n, w = len(ids), self.w
        x = w["embeddings.word_embeddings.weight"][ids]
        if self.mpnet:
            x = x + w["embeddings.position_embeddings.weight"][2:n + 2]
        else:
            x = x + w["embeddings.position_embeddings.weight"][:n] + w["embeddings.token_type_embeddings.weight"][0]
        x = self._ln(x, "embeddings.LayerNorm")
        heads = self.cfg["num_attention_heads"]
        dims = x.shape[1]
        hd = dims // heads
        bias = self._relative_bias(n) if self.mpnet else 0.0
        if self.mpnet:
            names = ("attention.attn.q", "attention.attn.k", "attention.attn.v", "attention.attn.o", "attention.LayerNorm")
        else:
            names = ("attention.self.query", "attention.self.key", "attention.self.value",
                     "attention.output.dense", "attention.output.LayerNorm")
        for i in range(self.cfg["num_hidden_layers"]):
            p = f"encoder.layer.{i}."
            q, k, v = (self._lin(x, p + m).reshape(n, heads, hd).transpose(1, 0, 2) for m in names[:3])
            a = q @ k.transpose(0, 2, 1) / math.sqrt(hd) + bias
            a = np.exp(a - a.max(-1, keepdims=True))
            a /= a.sum(-1, keepdims=True)
            c = (a @ v).transpose(1, 0, 2).reshape(n, dims)
            x = self._ln(x + self._lin(c, p + names[3]), p + names[4])
            h = self._lin(x, p + "intermediate.dense")
            h = 0.5 * h * (1 + erf(h / math.sqrt(2)))
            x = self._ln(x + self._lin(h, p + "output.dense"), p + "output.LayerNorm")
        v = x[0] if self.cls else x.mean(0)
        return v / np.linalg.norm(v)


def scores(needs, names, rank):
    t1 = t3 = 0
    rr = 0.0
    for need in needs:
        order = np.argsort(-rank(need), kind="stable")[:20]
        hit = next((r for r, j in enumerate(order) if names[j] in need["answers"]), None)
        if hit is not None:
            t1 += hit == 0
            t3 += hit < 3
            rr += 1 / (hit + 1)
    n = len(needs)
    return f"top-1 {100 * t1 / n:5.1f}%  top-3 {100 * t3 / n:5.1f}%  MRR {rr / n:.3f}  ({n} needs)"


EVAL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "catalog", "tests", "search_eval")


def learning_bound(enc, prefix):
    """Top-1 and top-3 of the second phrasings, only recorded tools ranked, each by its closest record."""
    def read(name):
        with open(os.path.join(EVAL, name)) as f:
            return [json.loads(line) for line in f if line.strip()]
    first, second = read("needs.jsonl"), read("paraphrases.jsonl")
    assert len(first) == len(second), "needs.jsonl and paraphrases.jsonl must match line for line"
    a = [enc.embed(prefix + n["need"]) for n in first]
    b = [enc.embed(prefix + n["need"]) for n in second]
    t1 = t3 = 0
    for half in (0, 1):
        recorded = [i for i in range(len(first)) if i % 2 == half]
        for i in recorded:
            closest = {}
            for j in recorded:
                tool = first[j]["answers"][0]
                closest[tool] = max(closest.get(tool, -1.0), float(a[j] @ b[i]))
            ranked = sorted(closest, key=lambda t: -closest[t])
            hit = next((r for r, t in enumerate(ranked) if t in second[i]["answers"]), None)
            t1 += hit == 0
            t3 += hit is not None and hit < 3
    n = len(first)
    print(f"nearest record alone: top-1 {100 * t1 / n:5.1f}%  top-3 {100 * t3 / n:5.1f}%  ({n} needs)")


# crates/catalog/src/index.rs and learned.rs; the hub weight, shift and centre are the static model's
# (crates/catalog/src/tuning.rs, STATIC: the transformer's own are there too, and the evaluation measures
# them with CEM_ONNX_MODEL set).
LEARN_WEIGHT, LEARN_SHARED_FLOOR, LEARN_MEANING_WEIGHT, LEARN_HUB_WEIGHT, HUB_NEIGHBOURS = 1.0, 0.5, 1.5, 0.5, 5
# crates/catalog/src/index.rs (`shifted`) and prepared.rs (`used_tools`).
LEARN_SHIFT, SHIFT_CENTRE = 1.25, 1.5
# One use recorded: 1 - e^-1 of what many give (learned.rs, `weight_at`).
ONE_USE = 1 - math.exp(-1)


def hubs(vectors, tools):
    """Each record's hubness less the mean (learned.rs, `hubs`): the mean cosine of its closest records
    of other tools (every record is a reference here: the evaluation has fewer than 256)."""
    cos = vectors @ vectors.T
    raw = []
    for i in range(len(tools)):
        other = sorted((c for j, c in enumerate(cos[i]) if tools[j] != tools[i]), reverse=True)[:HUB_NEIGHBOURS]
        raw.append(sum(other) / len(other) if other else None)
    known = [r for r in raw if r is not None]
    mean = sum(known) / max(1, len(known))
    return np.array([0.0 if r is None else r - mean for r in raw])


def blended(lex, cos, server):
    return LEXICAL_SHARE * lex + (1 - LEXICAL_SHARE) * np.maximum(cos + SERVER_WEIGHT * server, 0)


def moves(tv, vectors, of, shift_weight):
    """Each recorded tool's move (index.rs, `shifted`; prepared.rs, `used_tools`): its shift (its
    records' mean less SHIFT_CENTRE times the other tools' records' mean), shift_weight times its
    records' strength, and its vector's length before and after; made once per set of records."""
    of = np.array(of)
    made = {}
    for t in set(of.tolist()):
        own = vectors[of == t]
        others = vectors[of != t]
        shift = own.mean(0) - (SHIFT_CENTRE * others.mean(0) if len(others) else 0)
        k = shift_weight * (1 - math.exp(-len(own)))  # each record one use
        made[t] = (shift, k, np.linalg.norm(tv[t]) / np.linalg.norm(tv[t] + k * shift))
    return made


def shifted(made, parts, query, need):
    """What each move of `made` changes in its tool's score for `need`, keeping its length."""
    lex, cos, server = parts(need)
    q = query(need)
    change = {}
    for t, (shift, k, scale) in made.items():
        cosine = (cos[t] + k * float(shift @ q)) * scale
        change[t] = float(blended(lex[t], cosine, server[t]) - blended(lex[t], cos[t], server[t]))
    return change


def learning_trade(needs, names, base, vector, floor, temperature, hub_weight=LEARN_HUB_WEIGHT,
                   meaning_weight=LEARN_MEANING_WEIGHT, tv=None, parts=None, query=None, shift_weight=LEARN_SHIFT):
    """Top-1 and top-3 of the second phrasings with their first recorded, and of the needs nobody used
    (with `floor` None, without records). With `tv` (the tools' vectors), `parts` (a need's scaled
    lexical scores, cosines and server cosines) and `query` (a need's vector as the ranking embeds it),
    the recorded tools' vectors move too."""
    index = {n: i for i, n in enumerate(names)}
    first = [n for n in needs if n["set"] == "needs.jsonl"]
    second = [n for n in needs if n["set"] == "paraphrases.jsonl"]
    ranks = {"again": [], "unused": []}
    for half in (0, 1):
        recorded = [n for n in first if n["line"] % 2 == half]
        tools = {n["answers"][0] for n in recorded}
        vectors = np.stack([vector(n) for n in recorded])
        of = [index[n["answers"][0]] for n in recorded]
        terms = [set(n["terms"]) for n in recorded]
        hub = hubs(vectors, of) * hub_weight
        made = moves(tv, vectors, of, shift_weight) if tv is not None and floor is not None else {}
        sets = {
            "again": [n for n in second if n["line"] % 2 == half],
            "unused": [n for n in second if n["line"] % 2 != half and not tools & set(n["answers"])],
        }
        for kind, searched in sets.items():
            for need in searched:
                score = base(need).copy()
                boost = {}
                if floor is None:
                    recorded_tools = []
                else:
                    recorded_tools = of
                q = set(need["terms"])
                for t, rt in zip(recorded_tools, terms):
                    shared = len(q & rt) / max(1, len(q | rt))
                    by_words = LEARN_WEIGHT * min(max((shared - LEARN_SHARED_FLOOR) / (1 - LEARN_SHARED_FLOOR), 0), 1)
                    if by_words > 0:
                        boost[t] = max(boost.get(t, 0.0), ONE_USE * by_words)
                nearest = {}
                for t, c in zip(recorded_tools, vectors @ vector(need) - hub):
                    nearest[t] = max(nearest.get(t, -1.0), float(c))
                weights = {t: math.exp((c - floor) / temperature) for t, c in nearest.items()} if nearest else {}
                total = 1 + sum(weights.values())
                for t, w in weights.items():
                    if w / total > 0.01:
                        boost[t] = max(boost.get(t, 0.0), ONE_USE * meaning_weight * w / total)
                if floor is not None and tv is not None and shift_weight > 0:
                    for t, c in shifted(made, parts, query, need).items():
                        boost[t] = boost.get(t, 0.0) + c
                for t, b in boost.items():
                    if score[t] < 0 and b <= 0:
                        continue
                    score[t] = max(score[t], 0.0) + b
                order = np.argsort(-score, kind="stable")[:20]
                ranks[kind].append(next((r for r, j in enumerate(order) if names[j] in need["answers"]), None))

    def line(rs):
        top = lambda k: 100 * sum(1 for r in rs if r is not None and r < k) / len(rs)
        return f"{top(1):5.1f} {top(3):5.1f}"
    return line(ranks["again"]), line(ranks["unused"])


def learning_table(needs, names, tools, of, models):
    """The learning grid, for the built-in model (the export's vectors and scores) and for each of
    `models` (label, tool vectors, a need's vector, hybrid scores)."""
    if "static" not in needs[0] or "static" not in tools[0]:
        raise SystemExit("this export has no built-in model's vectors: export with the `semantic` feature")
    st = np.array([t["static"] for t in tools], dtype=np.float32)
    static_centroids = np.stack([st[of == s].sum(0) for s in range(of.max() + 1)])
    static_centroids /= np.linalg.norm(static_centroids, axis=1, keepdims=True)
    for need in needs:
        need["_static"] = np.array(need["static"], dtype=np.float32)
        need["_static_query"] = np.array(need["static_query"], dtype=np.float32)
        need["_hybrid"] = np.full(len(tools), -1.0)
        for i, s in need["hybrid"]:
            need["_hybrid"][i] = s
        lex = np.zeros(len(tools))
        for i, s in need["lexical"]:
            lex[i] = s
        need["_lex"] = lex / lex.max() if lex.max() > 0 else lex

    def parts(tv, centroids, query):
        return lambda n: (n["_lex"], tv @ query(n), (centroids @ query(n))[of])

    rows = [("built-in", st, lambda n: n["_static_query"], lambda n: n["_hybrid"], lambda n: n["_static"],
             parts(st, static_centroids, lambda n: n["_static_query"]))]
    for label, tv, query, hybrid in models:
        centroids = np.stack([tv[of == s].sum(0) for s in range(of.max() + 1)])
        centroids /= np.linalg.norm(centroids, axis=1, keepdims=True)
        rows.append((label, tv, query, hybrid, query, parts(tv, centroids, query)))
    print("model     floor  temp  move   another phrasing top-1 top-3   nobody used top-1 top-3")
    for label, tv, query, base, vector, part in rows:
        again, unused = learning_trade(needs, names, base, vector, None, None)
        print(f"{label:9s} no records          {again}{'':16s}{unused}")
        for floor in (0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75):
            for temperature in (0.02, 0.04):
                for move in (0.0, LEARN_SHIFT):
                    again, unused = learning_trade(needs, names, base, vector, floor, temperature, tv=tv,
                                                   parts=part, query=vector, shift_weight=move)
                    print(f"{label:9s} {floor:5.2f}  {temperature:4.2f}  {move:4.2f}   {again}{'':16s}{unused}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("export", nargs="?")
    ap.add_argument("model")
    ap.add_argument("--query-prefix", default="")
    ap.add_argument("--doc-prefix", default="")
    ap.add_argument("--learning-bound", action="store_true")
    ap.add_argument("--learning", action="store_true")
    args = ap.parse_args()
    if args.learning_bound:
        learning_bound(Encoder(args.model), args.query_prefix)
        return
    if args.export is None:
        ap.error("the export (eval.json) is needed unless --learning-bound is given")
    data = json.load(open(args.export))
    tools, needs = data["tools"], data["needs"]
    names = [t["name"] for t in tools]
    if args.model == "builtin":
        if not args.learning:
            ap.error("the built-in model is measured by the evaluation itself; `builtin` is for --learning")
        servers = sorted({t["server"] for t in tools})
        learning_table(needs, names, tools, np.array([servers.index(t["server"]) for t in tools]), [])
        return
    enc = Encoder(args.model)
    tv = np.array([(enc.embed(args.doc_prefix + t["short"]) + enc.embed(args.doc_prefix + t["long"])) / 2 for t in tools])
    servers = sorted({t["server"] for t in tools})
    of = np.array([servers.index(t["server"]) for t in tools])
    centroids = np.stack([tv[of == s].sum(0) for s in range(len(servers))])
    centroids /= np.linalg.norm(centroids, axis=1, keepdims=True)
    started = time.perf_counter()
    for need in needs:
        need["_q"] = enc.embed(args.query_prefix + need["need"])
    per_query = (time.perf_counter() - started) * 1000 / len(needs)

    def cosine(need):
        return tv @ need["_q"]

    def hybrid(need):
        cos = tv @ need["_q"]
        lex = np.zeros(len(tools))
        for i, s in need["lexical"]:
            lex[i] = s
        best = lex.max()
        lex_share = lex / best if best > 0 else lex
        s = LEXICAL_SHARE * lex_share + (1 - LEXICAL_SHARE) * np.maximum(cos + SERVER_WEIGHT * (centroids @ need["_q"])[of], 0)
        s[(lex == 0) & (cos < MIN_COSINE)] = -1
        return s

    if args.learning:
        learning_table(needs, names, tools, of, [("this", tv, lambda n: n["_q"], hybrid)])
        return
    for file in ("needs.jsonl", "named.jsonl"):
        subset = [n for n in needs if n["set"] == file]
        print(f"{file:12s} cosine  {scores(subset, names, cosine)}")
        print(f"{file:12s} hybrid  {scores(subset, names, hybrid)}")
    print(f"numpy forward pass: {per_query:.1f} ms a need (not the speed of an optimized runtime)")


if __name__ == "__main__":
    main()
