"""The synthetic model: a tiny random-weight Qwen3-MoE built offline (no hub, no torch).

Weights come from numpy with a fixed seed; the tokenizer is a byte-level BPE trained on the
running Python's own standard-library sources, wrapped as a fast tokenizer with a ChatML
template; `generation_config.json` makes every request generate exactly max_tokens.
Throughput measured on it is real; its text is not.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import sysconfig
from collections.abc import Sequence
from pathlib import Path

import numpy as np


class SyntheticModelError(ValueError):
    """A bad synthetic parameter; the message is one line naming the model."""


SYNTHETIC_DEFAULTS = {
    "hidden_size": 128,
    "num_layers": 2,
    "num_heads": 4,
    "num_kv_heads": 2,
    "head_dim": 32,
    "num_experts": 8,
    "experts_per_token": 2,
    "moe_intermediate_size": 64,
    "intermediate_size": 256,
    "vocab_size": 4096,
    "max_position_embeddings": 4096,
    "seed": 0,
    "dtype": "float32",
}
DTYPES = ("float32", "bfloat16", "float16")

# Added first by the trainer, so they get ids 0, 1, 2.
ENDOFTEXT, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = [ENDOFTEXT, IM_START, IM_END]

# ChatML. Content may be a string or a list of {"type": "text", "text": ...} parts,
# since OpenAI-style servers pass either.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
    "{%- if message['content'] is string -%}{{- message['content'] -}}"
    "{%- elif message['content'] -%}"
    "{%- for part in message['content'] -%}"
    "{%- if part['type'] == 'text' -%}{{- part['text'] -}}{%- endif -%}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)

# Tokenizer corpus: the running Python's own stdlib sources, sorted, up to this many
# characters (~1 s of training). `_sysconfigdata*` is skipped: it differs per build.
CORPUS_CHARS = 3_000_000
MIN_CORPUS_CHARS = 200_000


def synthetic_params(name: str, params: dict | None) -> dict:
    """Defaults filled in and checked; raises SyntheticModelError on a bad value."""
    params = dict(params or {})
    unknown = sorted(set(params) - set(SYNTHETIC_DEFAULTS))
    if unknown:
        raise SyntheticModelError(f"model {name!r}: unknown synthetic parameter(s) {unknown}")
    p = {**SYNTHETIC_DEFAULTS, **params}
    for key, val in p.items():
        if key == "dtype":
            continue
        lowest = 0 if key == "seed" else 1
        if not isinstance(val, int) or isinstance(val, bool) or val < lowest:
            raise SyntheticModelError(
                f"model {name!r}: synthetic {key} must be an integer >= {lowest}, got {val!r}"
            )
    if p["dtype"] not in DTYPES:
        raise SyntheticModelError(
            f"model {name!r}: synthetic dtype must be one of {', '.join(DTYPES)}, "
            f"got {p['dtype']!r}"
        )
    if p["num_heads"] % p["num_kv_heads"]:
        raise SyntheticModelError(f"model {name!r}: num_heads must be a multiple of num_kv_heads")
    if p["experts_per_token"] > p["num_experts"]:
        raise SyntheticModelError(f"model {name!r}: experts_per_token exceeds num_experts")
    # A byte-level BPE needs its 256-byte alphabet plus the special tokens.
    if p["vocab_size"] < 512:
        raise SyntheticModelError(f"model {name!r}: synthetic vocab_size must be >= 512")
    return p


def build_synthetic(name: str, params: dict | None, files_dir: Path) -> tuple[Path, dict]:
    """Build the model into files_dir (replacing it); return (path, extra manifest fields)."""
    p = synthetic_params(name, params)
    # Build beside the target and swap in, so a crash never leaves a half-built model.
    tmp = files_dir.with_name(files_dir.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)

    tokenizer, corpus = train_tokenizer(name, p["vocab_size"])
    tokenizer.save(str(tmp / "tokenizer.json"))
    ids = {tok: tokenizer.token_to_id(tok) for tok in SPECIAL_TOKENS}
    _write_json(tmp / "tokenizer_config.json", tokenizer_config(p, ids))
    _write_json(tmp / "config.json", model_config(p, ids))
    _write_json(
        tmp / "generation_config.json",
        {
            "bos_token_id": ids[ENDOFTEXT],
            # An empty list (not null) makes transformers generate exactly max_tokens.
            "eos_token_id": [],
            "pad_token_id": ids[ENDOFTEXT],
            # Greedy by default: every variant and repeat then decodes the same tokens.
            "do_sample": False,
        },
    )
    save_weights(synthetic_weights(p, quiet_token_ids(tokenizer)), tmp / "model.safetensors", p)

    if files_dir.exists():
        shutil.rmtree(files_dir)
    tmp.rename(files_dir)
    return files_dir.resolve(), {"synthetic_params": p, "tokenizer_corpus": corpus}


def stdlib_corpus(limit: int = CORPUS_CHARS) -> tuple[list[str], dict]:
    """Sorted top-level stdlib .py files up to `limit` characters, and a description."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    texts, chars, digest = [], 0, hashlib.sha256()
    for path in sorted(stdlib.glob("*.py")):
        if path.name.startswith("_sysconfigdata") or chars >= limit:
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        texts.append(text)
        chars += len(text)
        digest.update(text.encode())
    info = {
        "source": str(stdlib),
        "python": ".".join(map(str, sys.version_info[:3])),
        "files": len(texts),
        "chars": chars,
        "sha256": digest.hexdigest(),
    }
    return texts, info


def train_tokenizer(name: str, vocab_size: int):
    """Byte-level BPE trained on the stdlib sources; deterministic for a given Python."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    texts, info = stdlib_corpus()
    if info["chars"] < MIN_CORPUS_CHARS:
        raise SyntheticModelError(
            f"model {name!r}: only {info['chars']} characters of Python stdlib source found in "
            f"{info['source']}, too little to train the synthetic tokenizer"
        )
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer, length=len(texts))
    return tok, info


def quiet_token_ids(tokenizer) -> list[int]:
    """Tokens that show no text on their own: special, whitespace-only, partial UTF-8.

    Their lm_head rows are zeroed so greedy decoding never picks them: special tokens
    and partial characters stream as empty deltas, and a run of whitespace is held back
    by chat parsers and sent as one late chunk; either would distort TTFT and ITL.
    """
    quiet = []
    for token_id in range(tokenizer.get_vocab_size()):
        text = tokenizer.decode([token_id], skip_special_tokens=True)
        if not text.strip() or "\ufffd" in text:
            quiet.append(token_id)
    return quiet


def tokenizer_config(p: dict, ids: dict) -> dict:
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None,
        "eos_token": IM_END,
        "pad_token": ENDOFTEXT,
        "unk_token": None,
        "add_bos_token": False,
        "add_eos_token": False,
        "add_prefix_space": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": p["max_position_embeddings"],
        "chat_template": CHAT_TEMPLATE,
    }


def model_config(p: dict, ids: dict) -> dict:
    return {
        "architectures": ["Qwen3MoeForCausalLM"],
        "model_type": "qwen3_moe",
        "vocab_size": p["vocab_size"],
        "hidden_size": p["hidden_size"],
        "intermediate_size": p["intermediate_size"],
        "moe_intermediate_size": p["moe_intermediate_size"],
        "num_hidden_layers": p["num_layers"],
        "num_attention_heads": p["num_heads"],
        "num_key_value_heads": p["num_kv_heads"],
        "head_dim": p["head_dim"],
        "hidden_act": "silu",
        "max_position_embeddings": p["max_position_embeddings"],
        "initializer_range": 0.02,
        "rms_norm_eps": 1e-6,
        "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
        "attention_bias": False,
        "attention_dropout": 0.0,
        "use_cache": True,
        "use_sliding_window": False,
        "sliding_window": None,
        "tie_word_embeddings": False,
        # num_experts is what Hub checkpoints and most engines read; transformers 5
        # calls it num_local_experts.
        "num_experts": p["num_experts"],
        "num_local_experts": p["num_experts"],
        "num_experts_per_tok": p["experts_per_token"],
        "norm_topk_prob": False,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "output_router_logits": False,
        "router_aux_loss_coef": 0.001,
        "bos_token_id": ids[ENDOFTEXT],
        "eos_token_id": ids[IM_END],
        "pad_token_id": ids[ENDOFTEXT],
        "dtype": p["dtype"],
    }


def weight_shapes(p: dict) -> dict[str, tuple[int, ...]]:
    """Checkpoint key -> shape ([out, in]) in Hugging Face's Qwen3-MoE naming."""
    V, H, hd = p["vocab_size"], p["hidden_size"], p["head_dim"]
    nh, nkv, E = p["num_heads"], p["num_kv_heads"], p["num_experts"]
    inter = p["moe_intermediate_size"]
    shapes = {
        "model.embed_tokens.weight": (V, H),
        "model.norm.weight": (H,),
        "lm_head.weight": (V, H),
    }
    for i in range(p["num_layers"]):
        pre = f"model.layers.{i}."
        shapes.update(
            {
                pre + "input_layernorm.weight": (H,),
                pre + "post_attention_layernorm.weight": (H,),
                pre + "self_attn.q_proj.weight": (nh * hd, H),
                pre + "self_attn.k_proj.weight": (nkv * hd, H),
                pre + "self_attn.v_proj.weight": (nkv * hd, H),
                pre + "self_attn.o_proj.weight": (H, nh * hd),
                pre + "self_attn.q_norm.weight": (hd,),
                pre + "self_attn.k_norm.weight": (hd,),
                pre + "mlp.gate.weight": (E, H),
            }
        )
        for j in range(E):
            ex = f"{pre}mlp.experts.{j}."
            shapes[ex + "gate_proj.weight"] = (inter, H)
            shapes[ex + "up_proj.weight"] = (inter, H)
            shapes[ex + "down_proj.weight"] = (H, inter)
    return shapes


def synthetic_weights(p: dict, quiet_ids: Sequence[int] = ()) -> dict[str, np.ndarray]:
    """Norms 1.0, everything else normal(0, 0.02), drawn in a fixed key order from `seed`."""
    rng = np.random.default_rng(p["seed"])
    weights = {}
    for key, shape in weight_shapes(p).items():
        if key.endswith("norm.weight"):
            weights[key] = np.ones(shape, dtype=np.float32)
        else:
            weights[key] = rng.standard_normal(shape, dtype=np.float32) * np.float32(0.02)
    weights["lm_head.weight"][list(quiet_ids)] = 0.0
    return weights


def save_weights(weights: dict[str, np.ndarray], path: Path, p: dict) -> None:
    # transformers refuses safetensors files without format metadata.
    metadata = {"format": "pt"}
    if p["dtype"] == "bfloat16":
        _save_bf16(weights, path, metadata)
    else:
        from safetensors.numpy import save_file

        dtype = np.float16 if p["dtype"] == "float16" else np.float32
        arrays = {k: v.astype(dtype) for k, v in weights.items()}
        save_file(arrays, str(path), metadata=metadata)
    # safetensors creates the file 0600; a server run by another user must read it.
    path.chmod(0o644)


def _save_bf16(weights: dict[str, np.ndarray], path: Path, metadata: dict) -> None:
    """numpy has no bfloat16, so write the (simple) safetensors layout by hand."""
    header, chunks, offset = {"__metadata__": metadata}, [], 0
    for key in sorted(weights):
        bits = np.ascontiguousarray(weights[key], dtype=np.float32).view(np.uint32)
        # Round to nearest even on the 16 bits that are dropped.
        bf16 = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype("<u2").tobytes()
        header[key] = {
            "dtype": "BF16",
            "shape": list(weights[key].shape),
            "data_offsets": [offset, offset + len(bf16)],
        }
        chunks.append(bf16)
        offset += len(bf16)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)  # the format pads the header to 8 bytes with spaces
    with open(path, "wb") as f:
        f.write(len(head).to_bytes(8, "little"))
        f.write(head)
        for chunk in chunks:
            f.write(chunk)


# --- manifest ---------------------------------------------------------------------


def _write_json(path: Path, data) -> None:
    Path(path).write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
