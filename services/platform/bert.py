"""BERT sentence encoders without torch, for small models such as all-MiniLM-L6-v2: two
runners over one tokenizer, batching and pooling.

* :class:`BertEncoder`, NumPy float32 — the reference. The model is six layers of 384
  wide; its forward pass is a few matrix products per layer, which NumPy's BLAS runs as
  fast on two CPU cores as torch does, without ~900 MB of torch and transformers. The
  weights are read from the model's ``model.safetensors`` (``safetensors.numpy``), the
  WordPiece tokenizer from its ``tokenizer.json`` (the Rust ``tokenizers`` library): exactly
  the files the sentence-transformers package would load, so the vectors agree with it
  (cosine above 0.99999; checked in tests/integration/pipeline/test_embeddings.py).
* :class:`OnnxEncoder`, onnxruntime over an int8 graph (:func:`cached_quantized_graph`) —
  the default: the weight products run on the CPU's int8 dot-product instructions, 2.7
  times the passages per CPU-second at cosine ~0.99 to the reference.

Sentence embedding = mean of the last layer over the real tokens, L2-normalised (the
model's ``1_Pooling`` configuration), inputs truncated to ``max_seq_length`` tokens.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np

_SQRT_2_OVER_PI = np.float32(0.7978845608028654)


def _gelu(x: np.ndarray) -> np.ndarray:
    """GELU in its tanh form, in place on ``x``: three times faster in NumPy than the erf form
    (which NumPy lacks and would need a polynomial), and within 5e-4 of it per activation;
    the sentence vectors stay within 2e-6 (cosine) of sentence-transformers'."""
    inner = x * x
    inner *= np.float32(0.044715)
    inner += np.float32(1.0)
    inner *= x
    inner *= _SQRT_2_OVER_PI
    np.tanh(inner, out=inner)
    inner += np.float32(1.0)
    inner *= np.float32(0.5)
    x *= inner
    return x


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    """Layer norm of the rows of a 2-D float32 ``x``, in place (callers pass a temporary)."""
    x -= x.mean(axis=-1, keepdims=True)
    scale = np.einsum("ij,ij->i", x, x)
    scale /= np.float32(x.shape[-1])
    scale += np.float32(eps)
    np.sqrt(scale, out=scale)
    np.reciprocal(scale, out=scale)
    x *= scale[:, None]
    x *= weight
    x += bias
    return x


def _affine(x: np.ndarray, w: np.ndarray, b: np.ndarray, residual: np.ndarray | None = None) -> np.ndarray:
    """``x @ w + b (+ residual)`` with one new array: the sums land in the product's memory."""
    out = x @ w
    out += b
    if residual is not None:
        out += residual
    return out


@dataclass(frozen=True)
class _Layer:
    qkv_w: np.ndarray  # (hidden, 3*hidden), transposed for x @ w
    qkv_b: np.ndarray
    out_w: np.ndarray
    out_b: np.ndarray
    ln1_w: np.ndarray
    ln1_b: np.ndarray
    up_w: np.ndarray
    up_b: np.ndarray
    down_w: np.ndarray
    down_b: np.ndarray
    ln2_w: np.ndarray
    ln2_b: np.ndarray


def mean_pool(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """The model's pooling (``1_Pooling``): mean of the token states over the real tokens of
    each row, L2-normalised; ``hidden`` is (batch, length, width), ``mask`` 1 for real tokens."""
    mask = mask.astype(np.float32, copy=False)
    summed = np.einsum("blh,bl->bh", hidden, mask)
    pooled = summed / np.maximum(mask.sum(axis=1, keepdims=True), 1.0)
    norms = np.linalg.norm(pooled, axis=1, keepdims=True)
    return (pooled / np.maximum(norms, 1e-12)).astype(np.float32)


class _SentenceEncoder:
    """Tokenizing and length-sorted batching shared by the runners; a runner supplies
    ``_forward(ids, mask)``: the pooled unit vectors of one padded batch."""

    rows_a_pass: int | None = None  # a runner whose vectors depend on their batch encodes fewer rows a pass

    def __init__(self, model_dir: Path, max_seq_length: int | None) -> None:
        from tokenizers import Tokenizer

        config = json.loads((model_dir / "config.json").read_text())
        if config.get("model_type") != "bert" or config.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError(f"{model_dir} is not a BERT model with absolute positions")
        if config.get("hidden_act") != "gelu":
            raise ValueError(f"{model_dir}: unsupported activation {config.get('hidden_act')!r}")
        st_config = model_dir / "sentence_bert_config.json"
        limit = max_seq_length or (json.loads(st_config.read_text()).get("max_seq_length") if st_config.is_file()
                                   else None) or config["max_position_embeddings"]
        self.config = config
        self.max_seq_length = int(min(limit, config["max_position_embeddings"]))
        self.dimension = int(config["hidden_size"])
        self.tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_length=self.max_seq_length)

    def _forward(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def encode(self, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
        """One unit vector per text, in input order. Texts of similar length are batched
        together so that padding costs little."""
        batch_size = min(batch_size, self.rows_a_pass or batch_size)
        encodings = self.tokenizer.encode_batch(list(texts))
        order = sorted(range(len(encodings)), key=lambda i: len(encodings[i].ids))
        out = np.zeros((len(encodings), self.dimension), dtype=np.float32)
        for start in range(0, len(order), batch_size):
            chosen = order[start:start + batch_size]
            length = max(len(encodings[i].ids) for i in chosen)
            ids = np.zeros((len(chosen), length), dtype=np.int64)
            mask = np.zeros((len(chosen), length), dtype=np.int64)
            for row, i in enumerate(chosen):
                n = len(encodings[i].ids)
                ids[row, :n] = encodings[i].ids
                mask[row, :n] = 1
            out[chosen] = self._forward(ids, mask)
        return out


class BertEncoder(_SentenceEncoder):
    """Mean-pooled, L2-normalised sentence vectors from a BERT checkpoint directory, in
    NumPy float32: the reference the faster runner is measured against."""

    def __init__(self, model_dir: Path, *, max_seq_length: int | None = None) -> None:
        from safetensors.numpy import load_file

        super().__init__(model_dir, max_seq_length)
        config = self.config
        self.hidden = self.dimension
        self.heads = int(config["num_attention_heads"])
        self.eps = float(config.get("layer_norm_eps", 1e-12))
        raw = load_file(str(model_dir / "model.safetensors"))
        w: dict[str, Any] = {k.removeprefix("bert."): v for k, v in raw.items()}
        f32 = lambda name: np.ascontiguousarray(w[name], dtype=np.float32)  # noqa: E731
        self.word = f32("embeddings.word_embeddings.weight")
        self.position = f32("embeddings.position_embeddings.weight")
        self.token_type = f32("embeddings.token_type_embeddings.weight")
        self.emb_ln = (f32("embeddings.LayerNorm.weight"), f32("embeddings.LayerNorm.bias"))
        self.layers = []
        for i in range(int(config["num_hidden_layers"])):
            p = f"encoder.layer.{i}."
            qkv_w = np.concatenate([f32(p + f"attention.self.{n}.weight") for n in ("query", "key", "value")])
            qkv_b = np.concatenate([f32(p + f"attention.self.{n}.bias") for n in ("query", "key", "value")])
            self.layers.append(_Layer(
                np.ascontiguousarray(qkv_w.T), qkv_b,
                np.ascontiguousarray(f32(p + "attention.output.dense.weight").T),
                f32(p + "attention.output.dense.bias"),
                f32(p + "attention.output.LayerNorm.weight"), f32(p + "attention.output.LayerNorm.bias"),
                np.ascontiguousarray(f32(p + "intermediate.dense.weight").T), f32(p + "intermediate.dense.bias"),
                np.ascontiguousarray(f32(p + "output.dense.weight").T), f32(p + "output.dense.bias"),
                f32(p + "output.LayerNorm.weight"), f32(p + "output.LayerNorm.bias")))

    def _forward(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        batch, length = ids.shape
        heads, size, hidden = self.heads, self.hidden // self.heads, self.hidden
        x = self.word[ids] + self.position[:length][None, :, :] + self.token_type[0][None, None, :]
        x = _layer_norm(x.reshape(batch * length, hidden), *self.emb_ln, self.eps)  # 2-D: one BLAS call each
        bias = ((1.0 - mask[:, None, None, :].astype(np.float32)) * np.float32(-1e9)).astype(np.float32)
        scale = np.float32(1.0 / np.sqrt(size))
        for layer in self.layers:
            qkv = _affine(x, layer.qkv_w, layer.qkv_b).reshape(batch, length, 3, heads, size)
            q = np.ascontiguousarray(qkv[:, :, 0].transpose(0, 2, 1, 3))  # (B, h, L, d)
            k = np.ascontiguousarray(qkv[:, :, 1].transpose(0, 2, 3, 1))  # (B, h, d, L)
            v = np.ascontiguousarray(qkv[:, :, 2].transpose(0, 2, 1, 3))
            scores = q @ k
            scores *= scale
            scores += bias
            scores -= scores.max(axis=-1, keepdims=True)
            np.exp(scores, out=scores)
            scores /= scores.sum(axis=-1, keepdims=True)
            context = (scores @ v).transpose(0, 2, 1, 3).reshape(batch * length, hidden)
            x = _layer_norm(_affine(context, layer.out_w, layer.out_b, x), layer.ln1_w, layer.ln1_b, self.eps)
            up = _gelu(_affine(x, layer.up_w, layer.up_b))
            x = _layer_norm(_affine(up, layer.down_w, layer.down_b, x), layer.ln2_w, layer.ln2_b, self.eps)
        return mean_pool(x.reshape(batch, length, hidden), mask)


# ------------------------------------------------------------------ onnxruntime, int8

# How the int8 graph is derived (part of its cache name: a change here derives it again).
QUANTIZATION: Final = "dynamic-int8-per-channel-v1"


def quantize_graph(source: Path, target: Path) -> None:
    """Write to ``target`` ``source``'s BERT graph with every weight product in int8: weights
    per output channel, activations quantized per batch as they come (onnxruntime's dynamic
    quantization, MatMulInteger on the CPU's int8 dot-product instructions).

    ``source`` may store its weights in any form onnxruntime can fold to constants (the
    packaged file keeps them as int8 times a scale, run as float32 products): they are
    folded first, so that the quantizer sees plain weight matrices. Needs the ``onnx``
    package; run once per installation, then the file is read from the cache.
    """
    class _Hint(logging.Filter):  # the quantizer logs advice to its developer on the root logger: not for operators
        def filter(self, record: logging.LogRecord) -> bool:
            return "pre-process" not in record.getMessage()

    hint = _Hint()
    logging.getLogger().addFilter(hint)
    try:
        _quantize(source, target)
    finally:
        logging.getLogger().removeFilter(hint)


def _quantize(source: Path, target: Path) -> None:
    import onnxruntime as ort
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        folded = Path(scratch) / "folded.onnx"
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC  # portable rewrites only
        options.optimized_model_filepath = str(folded)
        ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])
        quantize_dynamic(folded, Path(scratch) / "int8.onnx", op_types_to_quantize=["MatMul"], per_channel=True,
                         weight_type=QuantType.QInt8)
        os.replace(Path(scratch) / "int8.onnx", target)


def cached_quantized_graph(source: Path, digest: str, cache_dir: Path) -> Path:
    """The int8 graph derived from ``source`` (whose sha256 is ``digest``), made once and
    kept in ``cache_dir``; concurrent first starts each derive it in a private directory and
    rename it into place, so none reads a half-written file."""
    import onnxruntime as ort

    target = cache_dir / f"minilm-{digest[:16]}-{QUANTIZATION}-ort{ort.__version__}.onnx"
    if not target.is_file():
        cache_dir.mkdir(parents=True, exist_ok=True)
        quantize_graph(source, target)
    return target


class OnnxEncoder(_SentenceEncoder):
    """The same sentence vectors from an ONNX graph of the model run by onnxruntime: the
    graph maps (input_ids, attention_mask, token_type_ids) to the last layer's token states,
    and the pooling and normalisation are done here, as :class:`BertEncoder` does them.

    One text a pass: the int8 graph quantizes each product's input with one scale for the
    whole batch, padding included, so batched texts would get vectors that depend on their
    companions (cosine down to 0.97 between two batchings); alone, a text's vector depends on its
    text only. It costs ~35% more CPU than passes of 16 and is still well under float32's.
    ``threads`` intra-op threads (not spinning while they wait). A pass of one short text
    is a small product, which a second thread splits at a cost: on 2 loaded cores one thread
    ran ~1.2x the passages per CPU-second of two, to the bit the same vectors, and the
    pipeline's other stages and PostgreSQL want the other core. So the provider runs
    single-threaded passes, one per core (bench/bench_embedding.py)."""

    rows_a_pass = 1

    def __init__(self, model_dir: Path, graph: Path, *, max_seq_length: int | None = None, threads: int) -> None:
        import onnxruntime as ort

        super().__init__(model_dir, max_seq_length)
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = ort.InferenceSession(str(graph), options, providers=["CPUExecutionProvider"])
        inputs = {i.name for i in self.session.get_inputs()}
        if not {"input_ids", "attention_mask"} <= inputs or inputs - {"input_ids", "attention_mask", "token_type_ids"}:
            raise ValueError(f"{graph}: expected inputs input_ids, attention_mask (and token_type_ids), got "
                             f"{sorted(inputs)}")
        output = self.session.get_outputs()[0]
        if len(output.shape) != 3 or output.shape[-1] != self.dimension:
            raise ValueError(f"{graph}: expected token states (batch, sequence, {self.dimension}), got {output.shape}")
        self._token_types = "token_type_ids" in inputs

    def _forward(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        feed = {"input_ids": ids, "attention_mask": mask}
        if self._token_types:
            feed["token_type_ids"] = np.zeros_like(ids)
        hidden = self.session.run(None, feed)[0]
        return mean_pool(hidden, mask)
