"""A BERT sentence transformer (mean pooling, unit vector) from its safetensors to ONNX, 8-bit.

    python3 export_onnx.py TEACHER_DIR OUT_DIR

TEACHER_DIR is a sentence-transformers directory (config.json, model.safetensors, tokenizer.json).
OUT_DIR gets model.onnx and vocab.txt, what `cem-embed`'s OnnxModel reads (crates/embed/src/onnx.rs):
one input `input_ids` (int64, one text: [CLS] ... [SEP], no padding, no batch); two outputs,
`embedding` (the mean of the last layer over the tokens, unit length) and `tokens` (the last layer,
one row per token: what a search pools over its query's words without its stop words, read in
context, for learning from use; the same run gives both). The graph is written here
from the weights, op by op (no torch), then its matrix products are quantized to 8 bits per
output channel (ONNX Runtime's dynamic quantization). Needs numpy, onnx, onnxruntime, safetensors.
"""
import json
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import QuantType, quantize_dynamic
from safetensors.numpy import load_file


def build(src):
    cfg = json.load(open(os.path.join(src, "config.json")))
    if cfg.get("model_type") != "bert":
        raise SystemExit(f"{src}: model_type {cfg.get('model_type')!r}; only BERT is written here")
    raw = load_file(os.path.join(src, "model.safetensors"))
    w = {k.split(".", 1)[1] if k.startswith("bert.") else k: v.astype(np.float32) for k, v in raw.items()}
    hidden, heads, layers = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_hidden_layers"]
    width, eps = hidden // heads, cfg.get("layer_norm_eps", 1e-12)
    inits, nodes = [], []

    def init(name, value):
        inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def node(op, inputs, **attrs):
        out = f"{op.lower()}_{len(nodes)}"
        nodes.append(helper.make_node(op, inputs, [out], **attrs))
        return out

    def linear(x, k):
        product = node("MatMul", [x, init(k + ".wT", w[k + ".weight"].T.copy())])
        return node("Add", [product, init(k + ".b", w[k + ".bias"])])

    def norm(x, k):
        return node("LayerNormalization", [x, init(k + ".g", w[k + ".weight"]), init(k + ".beta", w[k + ".bias"])],
                    axis=-1, epsilon=eps)

    ids = "input_ids"
    words = node("Gather", [init("word", w["embeddings.word_embeddings.weight"]), ids])
    zero = init("zero", np.array([0], np.int64))
    places = node("Slice", [init("position", w["embeddings.position_embeddings.weight"]), zero, node("Shape", [ids]), zero])
    x = node("Add", [node("Add", [words, places]), init("type0", w["embeddings.token_type_embeddings.weight"][0])])
    x = norm(x, "embeddings.LayerNorm")
    split = init("split", np.array([-1, heads, width], np.int64))
    join = init("join", np.array([-1, hidden], np.int64))
    scale = init("scale", np.array(1 / np.sqrt(width), np.float32))
    half, one, root2 = (init(n, np.array(v, np.float32)) for n, v in (("half", 0.5), ("one", 1.0), ("root2", np.sqrt(2))))
    for i in range(layers):
        p = f"encoder.layer.{i}."
        q = node("Transpose", [node("Reshape", [linear(x, p + "attention.self.query"), split])], perm=[1, 0, 2])
        k = node("Transpose", [node("Reshape", [linear(x, p + "attention.self.key"), split])], perm=[1, 2, 0])
        v = node("Transpose", [node("Reshape", [linear(x, p + "attention.self.value"), split])], perm=[1, 0, 2])
        attention = node("Softmax", [node("Mul", [node("MatMul", [q, k]), scale])], axis=-1)
        context = node("Reshape", [node("Transpose", [node("MatMul", [attention, v])], perm=[1, 0, 2]), join])
        x = norm(node("Add", [x, linear(context, p + "attention.output.dense")]), p + "attention.output.LayerNorm")
        t = linear(x, p + "intermediate.dense")
        gelu = node("Mul", [node("Mul", [t, half]), node("Add", [node("Erf", [node("Div", [t, root2])]), one])])
        x = norm(node("Add", [x, linear(gelu, p + "output.dense")]), p + "output.LayerNorm")
    mean = node("ReduceMean", [x], axes=[0], keepdims=0)
    nodes.append(helper.make_node("LpNormalization", [mean], ["embedding"], axis=-1, p=2))
    nodes.append(helper.make_node("Identity", [x], ["tokens"]))
    graph = helper.make_graph(nodes, "sentence", [helper.make_tensor_value_info(ids, TensorProto.INT64, ["tokens"])],
                              [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, [hidden]),
                               helper.make_tensor_value_info("tokens", TensorProto.FLOAT, ["tokens", hidden])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def vocabulary(src):
    """vocab.txt, or the WordPiece vocabulary inside tokenizer.json, one token a line in id order."""
    plain = os.path.join(src, "vocab.txt")
    if os.path.exists(plain):
        return open(plain, encoding="utf-8").read().splitlines()
    vocab = json.load(open(os.path.join(src, "tokenizer.json"), encoding="utf-8"))["model"]["vocab"]
    tokens = [None] * len(vocab)
    for token, i in vocab.items():
        tokens[i] = token
    assert None not in tokens, "tokenizer.json's vocabulary has gaps"
    return tokens


def main():
    src, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    full = os.path.join(out, "model.f32.onnx")
    onnx.save(build(src), full)
    quantize_dynamic(full, os.path.join(out, "model.onnx"), weight_type=QuantType.QInt8, per_channel=True,
                     reduce_range=True, op_types_to_quantize=["MatMul"])
    os.remove(full)
    with open(os.path.join(out, "vocab.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(vocabulary(src)) + "\n")
    print(f"{out}: model.onnx {os.path.getsize(os.path.join(out, 'model.onnx'))} bytes, vocab.txt")


if __name__ == "__main__":
    main()
