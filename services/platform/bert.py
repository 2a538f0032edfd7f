"""A BERT encoder in NumPy, for small sentence-embedding models such as all-MiniLM-L6-v2.

Why not torch: the model is six layers of 384 wide; its forward pass is a few matrix
products per layer, which NumPy's BLAS runs as fast on two CPU cores as torch does,
without ~900 MB of torch and transformers in the default install. The weights are read
from the model's ``model.safetensors`` (``safetensors.numpy``), the WordPiece tokenizer
from its ``tokenizer.json`` (the Rust ``tokenizers`` library): exactly the files the
sentence-transformers package would load, so the vectors agree with it (cosine above
0.99999; checked in tests/integration/pipeline/test_embeddings.py).

Sentence embedding = mean of the last layer over the real tokens, L2-normalised (the
model's ``1_Pooling`` configuration), inputs truncated to ``max_seq_length`` tokens.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


class BertEncoder:
    """Mean-pooled, L2-normalised sentence vectors from a BERT checkpoint directory."""

    def __init__(self, model_dir: Path, *, max_seq_length: int | None = None) -> None:
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        config = json.loads((model_dir / "config.json").read_text())
        if config.get("model_type") != "bert" or config.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError(f"{model_dir} is not a BERT model with absolute positions")
        if config.get("hidden_act") != "gelu":
            raise ValueError(f"{model_dir}: unsupported activation {config.get('hidden_act')!r}")
        st_config = model_dir / "sentence_bert_config.json"
        limit = max_seq_length or (json.loads(st_config.read_text()).get("max_seq_length") if st_config.is_file()
                                   else None) or config["max_position_embeddings"]
        self.max_seq_length = int(min(limit, config["max_position_embeddings"]))
        self.hidden = int(config["hidden_size"])
        self.heads = int(config["num_attention_heads"])
        self.eps = float(config.get("layer_norm_eps", 1e-12))
        self.dimension = self.hidden
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
        self.tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_length=self.max_seq_length)

    def _forward(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        batch, length = ids.shape
        heads, size, hidden = self.heads, self.hidden // self.heads, self.hidden
        x = self.word[ids] + self.position[:length][None, :, :] + self.token_type[0][None, None, :]
        x = _layer_norm(x.reshape(batch * length, hidden), *self.emb_ln, self.eps)  # 2-D: one BLAS call each
        bias = ((1.0 - mask[:, None, None, :]) * np.float32(-1e9)).astype(np.float32)
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
        x = x.reshape(batch, length, hidden)
        summed = (x * mask[:, :, None]).sum(axis=1)
        pooled = summed / np.maximum(mask.sum(axis=1, keepdims=True), 1.0)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.maximum(norms, 1e-12)).astype(np.float32)

    def encode(self, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
        """One unit vector per text, in input order. Texts of similar length are batched
        together so that padding costs little."""
        encodings = self.tokenizer.encode_batch(list(texts))
        order = sorted(range(len(encodings)), key=lambda i: len(encodings[i].ids))
        out = np.zeros((len(encodings), self.dimension), dtype=np.float32)
        for start in range(0, len(order), batch_size):
            chosen = order[start:start + batch_size]
            length = max(len(encodings[i].ids) for i in chosen)
            ids = np.zeros((len(chosen), length), dtype=np.int64)
            mask = np.zeros((len(chosen), length), dtype=np.float32)
            for row, i in enumerate(chosen):
                n = len(encodings[i].ids)
                ids[row, :n] = encodings[i].ids
                mask[row, :n] = 1.0
            out[chosen] = self._forward(ids, mask)
        return out
