"""servesweep.resources.models: synthetic build, manifests, and source errors (no torch needed)."""

import hashlib
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from fixtures.paths import ROOT
from safetensors import safe_open
from safetensors.numpy import load_file
from tokenizers import Tokenizer

from servesweep.resources.models import ModelSourceError, materialize

# Small enough that a build is mostly tokenizer training (~1 s).
TINY = {
    "hidden_size": 32,
    "num_layers": 2,
    "num_heads": 2,
    "num_kv_heads": 1,
    "head_dim": 16,
    "num_experts": 4,
    "experts_per_token": 2,
    "moe_intermediate_size": 16,
    "intermediate_size": 64,
    "vocab_size": 1024,
    "max_position_embeddings": 512,
}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    dest = tmp_path_factory.mktemp("tiny")
    manifest = materialize("tiny", {"synthetic": dict(TINY)}, dest)
    return dest, manifest


def files_dir(manifest) -> Path:
    return Path(manifest["path"])


def hashes(manifest) -> dict[str, str]:
    return {f["path"]: f["sha256"] for f in manifest["files"]}


def expected_shapes(cfg: dict) -> dict[str, tuple]:
    """Written out from config.json, independently of the module's own table."""
    V, H = cfg["vocab_size"], cfg["hidden_size"]
    hd, nh, nkv = cfg["head_dim"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    E, inter = cfg["num_experts"], cfg["moe_intermediate_size"]
    out = {"lm_head.weight": (V, H), "model.embed_tokens.weight": (V, H), "model.norm.weight": (H,)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}"
        out[f"{p}.input_layernorm.weight"] = (H,)
        out[f"{p}.post_attention_layernorm.weight"] = (H,)
        out[f"{p}.self_attn.q_proj.weight"] = (nh * hd, H)
        out[f"{p}.self_attn.k_proj.weight"] = (nkv * hd, H)
        out[f"{p}.self_attn.v_proj.weight"] = (nkv * hd, H)
        out[f"{p}.self_attn.o_proj.weight"] = (H, nh * hd)
        out[f"{p}.self_attn.q_norm.weight"] = (hd,)
        out[f"{p}.self_attn.k_norm.weight"] = (hd,)
        out[f"{p}.mlp.gate.weight"] = (E, H)
        for j in range(E):
            out[f"{p}.mlp.experts.{j}.gate_proj.weight"] = (inter, H)
            out[f"{p}.mlp.experts.{j}.up_proj.weight"] = (inter, H)
            out[f"{p}.mlp.experts.{j}.down_proj.weight"] = (H, inter)
    return out


def test_config_matches_params(tiny):
    _, manifest = tiny
    cfg = json.loads((files_dir(manifest) / "config.json").read_text())
    assert cfg["model_type"] == "qwen3_moe"
    assert cfg["architectures"] == ["Qwen3MoeForCausalLM"]
    assert cfg["tie_word_embeddings"] is False
    assert cfg["hidden_size"] == 32 and cfg["num_hidden_layers"] == 2
    assert cfg["num_experts"] == cfg["num_local_experts"] == 4
    assert cfg["num_experts_per_tok"] == 2
    assert cfg["rope_parameters"] == {"rope_theta": 10000.0, "rope_type": "default"}
    assert cfg["mlp_only_layers"] == [] and cfg["decoder_sparse_step"] == 1
    tok = Tokenizer.from_file(str(files_dir(manifest) / "tokenizer.json"))
    assert cfg["bos_token_id"] == tok.token_to_id("<|endoftext|>")
    assert cfg["eos_token_id"] == tok.token_to_id("<|im_end|>")
    gen = json.loads((files_dir(manifest) / "generation_config.json").read_text())
    # [] (not null) is what makes transformers produce exactly max_tokens.
    assert gen["eos_token_id"] == []


def test_weights_keys_shapes_values(tiny):
    _, manifest = tiny
    cfg = json.loads((files_dir(manifest) / "config.json").read_text())
    weights = load_file(str(files_dir(manifest) / "model.safetensors"))
    expected = expected_shapes(cfg)
    assert set(weights) == set(expected)
    for key, arr in weights.items():
        assert arr.shape == expected[key], key
        assert arr.dtype == np.float32, key
        if key.endswith("norm.weight"):
            assert np.all(arr == 1.0), key
    q = weights["model.layers.0.self_attn.q_proj.weight"]
    assert abs(float(q.std()) - 0.02) < 0.004
    with safe_open(str(files_dir(manifest) / "model.safetensors"), framework="numpy") as f:
        assert f.metadata() == {"format": "pt"}  # transformers refuses files without it


def test_quiet_tokens_never_win_greedy(tiny):
    _, manifest = tiny
    tok = Tokenizer.from_file(str(files_dir(manifest) / "tokenizer.json"))
    lm_head = load_file(str(files_dir(manifest) / "model.safetensors"))["lm_head.weight"]
    zero_rows = {i for i in range(lm_head.shape[0]) if not lm_head[i].any()}
    for special in ("<|endoftext|>", "<|im_start|>", "<|im_end|>"):
        assert tok.token_to_id(special) in zero_rows
    spaces = tok.encode("        ").ids
    assert len(spaces) == 1 and spaces[0] in zero_rows
    # Byte 0xC3 alone (byte-level symbol "Ã") is half of a UTF-8 character.
    assert tok.token_to_id("\u00c3") in zero_rows
    # Pieces of ordinary words keep their random rows.
    assert not set(tok.encode("def return self").ids) & zero_rows
    # Only a small share of the vocabulary is silenced.
    assert len(zero_rows) < lm_head.shape[0] // 4


def test_tokenizer_vocab_and_roundtrip(tiny):
    _, manifest = tiny
    tok = Tokenizer.from_file(str(files_dir(manifest) / "tokenizer.json"))
    assert tok.get_vocab_size() == TINY["vocab_size"]
    for text in [
        "def f(x):\n    return x + 1  # done\n",
        "héllo wörld ✓ 🚀 \t\r\n  trailing  ",
        "<|im_start|>user\nhi<|im_end|>\n",
    ]:
        ids = tok.encode(text).ids
        assert tok.decode(ids, skip_special_tokens=False) == text
    # Special tokens are single ids, not spelled out byte by byte.
    assert tok.encode("<|im_end|>").ids == [tok.token_to_id("<|im_end|>")]


def test_tokenizer_config_and_chat_template(tiny):
    jinja2 = pytest.importorskip("jinja2")
    _, manifest = tiny
    tcfg = json.loads((files_dir(manifest) / "tokenizer_config.json").read_text())
    assert tcfg["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert tcfg["eos_token"] == "<|im_end|>" and tcfg["pad_token"] == "<|endoftext|>"
    template = jinja2.Environment().from_string(tcfg["chat_template"])
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
    ]
    text = template.render(messages=messages, add_generation_prompt=True)
    assert text == (
        "<|im_start|>system\nbe brief<|im_end|>\n"
        "<|im_start|>user\nhi<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_manifest_matches_disk(tiny):
    dest, manifest = tiny
    assert json.loads((dest / "manifest.json").read_text()) == manifest
    assert manifest["model"] == "tiny"
    assert manifest["source"] == {"synthetic": TINY}
    assert manifest["synthetic"] is True
    root = files_dir(manifest)
    assert root.is_absolute() and root == (dest / "files").resolve()
    on_disk = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
    assert [f["path"] for f in manifest["files"]] == on_disk
    for f in manifest["files"]:
        data = (root / f["path"]).read_bytes()
        assert f["size"] == len(data)
        assert f["sha256"] == hashlib.sha256(data).hexdigest()
    assert manifest["total_bytes"] == sum(f["size"] for f in manifest["files"])
    assert manifest["built_s"] >= 0
    # No leftovers from the atomic writes.
    assert sorted(p.name for p in dest.iterdir()) == ["files", "manifest.json"]


@pytest.mark.slow
def test_deterministic_and_seeded(tiny, tmp_path):
    _, first = tiny
    again = materialize("tiny", {"synthetic": dict(TINY)}, tmp_path / "again")
    assert hashes(again) == hashes(first)
    reseeded = materialize("tiny", {"synthetic": {**TINY, "seed": 1}}, tmp_path / "reseeded")
    assert hashes(reseeded)["model.safetensors"] != hashes(first)["model.safetensors"]
    # The tokenizer does not depend on the seed.
    assert hashes(reseeded)["tokenizer.json"] == hashes(first)["tokenizer.json"]


@pytest.mark.slow
def test_rebuild_replaces_previous_files(tmp_path):
    materialize("m", {"synthetic": dict(TINY)}, tmp_path)
    (tmp_path / "files" / "stale.bin").write_bytes(b"x")
    manifest = materialize("m", {"synthetic": {**TINY, "seed": 3}}, tmp_path)
    assert not (tmp_path / "files" / "stale.bin").exists()
    assert "stale.bin" not in hashes(manifest)
    assert json.loads((tmp_path / "manifest.json").read_text())["source"]["synthetic"]["seed"] == 3


def test_bfloat16_matches_float32(tiny, tmp_path):
    _, f32_manifest = tiny
    manifest = materialize("bf", {"synthetic": {**TINY, "dtype": "bfloat16"}}, tmp_path)
    path = files_dir(manifest) / "model.safetensors"
    ref = load_file(str(files_dir(f32_manifest) / "model.safetensors"))
    # safetensors itself validates the hand-written header and offsets on open.
    with safe_open(str(path), framework="numpy") as f:
        assert set(f.keys()) == set(ref)
        assert f.metadata() == {"format": "pt"}
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + n])
    assert n % 8 == 0
    info = header["model.layers.0.mlp.gate.weight"]
    assert info["dtype"] == "BF16"
    start, end = (8 + n + o for o in info["data_offsets"])
    bits = np.frombuffer(raw[start:end], dtype="<u2").astype(np.uint32) << 16
    values = bits.view(np.float32).reshape(info["shape"])
    expect = ref["model.layers.0.mlp.gate.weight"]
    np.testing.assert_allclose(values, expect, rtol=2**-8)
    cfg = json.loads((files_dir(manifest) / "config.json").read_text())
    assert cfg["dtype"] == "bfloat16"


def test_path_source_in_place(tiny, tmp_path, monkeypatch):
    _, built = tiny
    model_dir = tmp_path / "local"
    model_dir.mkdir()
    (model_dir / "config.json").write_text("{}")
    (model_dir / "sub").mkdir()
    (model_dir / "sub" / "w.bin").write_bytes(b"abc")
    (model_dir / ".cache").mkdir()
    (model_dir / ".cache" / "junk").write_bytes(b"zzz")
    monkeypatch.chdir(tmp_path)
    manifest = materialize("local", {"path": "local"}, tmp_path / "out")
    assert manifest["path"] == str(model_dir.resolve())
    assert manifest["synthetic"] is False
    assert [f["path"] for f in manifest["files"]] == ["config.json", "sub/w.bin"]
    assert manifest["total_bytes"] == 5
    assert manifest["files"][1]["sha256"] == hashlib.sha256(b"abc").hexdigest()
    assert (tmp_path / "out" / "manifest.json").is_file()
    assert not (tmp_path / "out" / "files").exists()  # used in place, not copied


def assert_one_line_error(name, source, dest, *fragments):
    with pytest.raises(ModelSourceError) as err:
        materialize(name, source, dest)
    message = str(err.value)
    assert f"'{name}'" in message and "\n" not in message
    for fragment in fragments:
        assert fragment in message
    assert not (Path(dest) / "manifest.json").exists()
    return message


def test_path_source_errors(tmp_path):
    assert_one_line_error("gone", {"path": str(tmp_path / "nope")}, tmp_path / "o", "not a dir")
    (tmp_path / "empty").mkdir()
    assert_one_line_error("bare", {"path": str(tmp_path / "empty")}, tmp_path / "o", "config.json")


@pytest.mark.parametrize("value", ["org/name", "org/name@", "@abc123"])
def test_hf_needs_revision(tmp_path, value):
    assert_one_line_error("kimi", {"hf": value}, tmp_path, "org/name@revision")


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("how", ["offline", "refused"])
def test_hf_unreachable(tmp_path, monkeypatch, how):
    pytest.importorskip("huggingface_hub")
    import huggingface_hub.constants as hub_constants

    # The hub reads these at import time, so patch the module's values, not the env.
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(tmp_path / "cache"))
    if how == "offline":
        monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
    else:
        monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", False)
        monkeypatch.setattr(hub_constants, "ENDPOINT", f"http://127.0.0.1:{closed_port()}")
    message = assert_one_line_error(
        "kimi",
        {"hf": "moonshotai/Kimi-K2.5@abc123"},
        tmp_path / "dest",
        "cannot reach the Hugging Face Hub",
        "moonshotai/Kimi-K2.5@abc123",
        "'path:'",
    )
    assert len(message) < 400
    with pytest.raises(ModelSourceError) as failed:  # a setup failure's cause (setup.py)
        materialize("kimi", {"hf": "moonshotai/Kimi-K2.5@abc123"}, tmp_path / "dest")
    assert failed.value.cause == "hub_unreachable"


def test_hf_without_huggingface_hub(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # makes the import fail
    assert_one_line_error("kimi", {"hf": "org/name@abc"}, tmp_path, "not installed", "'path:'")
    with pytest.raises(ModelSourceError) as failed:
        materialize("kimi", {"hf": "org/name@abc"}, tmp_path)
    assert failed.value.cause == "tool_missing"


@pytest.mark.parametrize(
    "source, fragment",
    [
        ({}, "exactly one"),
        ({"synthetic": {}, "path": "/x"}, "exactly one"),
        ({"gguf": "x"}, "unknown source kind 'gguf'"),
        ("synthetic", "exactly one"),
        ({"synthetic": "tiny"}, "mapping"),
        ({"synthetic": {"hiden_size": 64}}, "hiden_size"),
        ({"synthetic": {"dtype": "int8"}}, "int8"),
        ({"synthetic": {"num_heads": 3, "num_kv_heads": 2}}, "multiple"),
        ({"synthetic": {"experts_per_token": 9}}, "experts_per_token"),
        ({"synthetic": {"vocab_size": 100}}, "vocab_size"),
        ({"synthetic": {"num_layers": 0}}, "num_layers"),
        ({"hf": 3}, "non-empty string"),
        ({"path": ""}, "non-empty string"),
    ],
)
def test_bad_sources(tmp_path, source, fragment):
    assert_one_line_error("m", source, tmp_path, fragment)


@pytest.mark.slow
def test_no_heavy_imports(tmp_path):
    # The workflow's own env has no torch; the package must never need it or Snakemake.
    code = (
        "import sys; from servesweep.resources.models import materialize; "
        f"materialize('m', {{'synthetic': {TINY!r}}}, {str(tmp_path)!r}); "
        "print(sorted({'torch', 'transformers', 'snakemake'} & set(sys.modules)))"
    )
    root = ROOT
    env = {**os.environ, "PYTHONPATH": str(root)}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"
