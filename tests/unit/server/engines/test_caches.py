"""Compile caches as a boot finds them: real directories, the variables that move them, the
one word a boot's record gets (servesweep.server.engines.caches)."""

from pathlib import Path

from servesweep.server.engines import get_engine
from servesweep.server.engines.caches import cache_state, note_growth


def fill(path: Path, n: int, size: int = 10) -> None:
    path.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        (path / f"k{i}.bin").write_bytes(b"x" * size)


def test_cold_partial_warm(tmp_path):
    dirs = {"a": tmp_path / "a", "b": tmp_path / "b" / "deep"}
    assert cache_state(dirs) == {
        "caches": "cold",
        "cache_dirs": {
            "a": {"path": str(tmp_path / "a"), "files": 0, "bytes": 0},
            "b": {"path": str(tmp_path / "b" / "deep"), "files": 0, "bytes": 0},
        },
    }
    (tmp_path / "b" / "deep").mkdir(parents=True)  # there but empty is still cold
    assert cache_state(dirs)["caches"] == "cold"
    fill(tmp_path / "a" / "sub", 3)
    state = cache_state(dirs)
    assert state["caches"] == "partial"
    assert state["cache_dirs"]["a"] == {"path": str(tmp_path / "a"), "files": 3, "bytes": 30}
    fill(dirs["b"], 1, 5)
    assert cache_state(dirs)["caches"] == "warm"
    assert cache_state({}) == {}


def test_growth_after_boot(tmp_path):
    dirs = {"triton": tmp_path / "t"}
    facts = cache_state(dirs)
    fill(dirs["triton"], 2, 100)  # what a boot compiled
    note_growth(facts, dirs)
    assert facts["cache_dirs"]["triton"] | {"path": ""} == {
        "path": "",
        "files": 0,
        "bytes": 0,
        "files_after_boot": 2,
        "bytes_after_boot": 200,
    }


def test_sglang_dirs_follow_the_servers_environment(tmp_path):
    env = {"HOME": str(tmp_path), "USER": "u", "TMPDIR": str(tmp_path / "tmp")}
    dirs = get_engine("sglang").cache_dirs(env)
    assert dirs == {
        "tvm-ffi": tmp_path / ".cache" / "tvm-ffi",
        "flashinfer": tmp_path / ".cache" / "flashinfer",
        "triton": tmp_path / ".triton" / "cache",
        "torch-inductor": tmp_path / "tmp" / "torchinductor_u",
    }
    moved = {
        **env,
        "TVM_FFI_CACHE_DIR": "/c/tvm",
        "FLASHINFER_WORKSPACE_BASE": "/c/fi",
        "TRITON_CACHE_DIR": "/c/triton",
        "TORCHINDUCTOR_CACHE_DIR": "/c/ind",
    }
    assert get_engine("sglang").cache_dirs(moved) == {
        "tvm-ffi": Path("/c/tvm"),
        "flashinfer": Path("/c/fi/.cache/flashinfer"),
        "triton": Path("/c/triton"),
        "torch-inductor": Path("/c/ind"),
    }
    # SGLang's log says nothing of its caches: the directories give its compile_cache word.
    fill(tmp_path / ".triton" / "cache", 1)
    state = get_engine("sglang").cache_state(env)
    assert state["caches"] == state["compile_cache"] == "partial"


def test_vllm_keeps_its_logs_word_and_adds_the_directories(tmp_path):
    env = {"HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    dirs = get_engine("vllm").cache_dirs(env)
    assert dirs["vllm"] == tmp_path / "xdg" / "vllm"
    assert get_engine("vllm").cache_dirs({**env, "VLLM_CACHE_ROOT": "/v"})["vllm"] == Path("/v")
    state = get_engine("vllm").cache_state(env)
    assert state["caches"] == "cold" and "compile_cache" not in state  # the log's hit / miss
    # Engines without cache directories record nothing.
    assert get_engine("command").cache_state(env) == {}


def test_transformers_names_the_caches_it_would_compile_into(tmp_path):
    env = {"HOME": str(tmp_path), "USER": "u", "TMPDIR": str(tmp_path / "tmp")}
    dirs = get_engine("transformers").cache_dirs(env)
    assert dirs == {
        "torch-inductor": tmp_path / "tmp" / "torchinductor_u",
        "triton": tmp_path / ".triton" / "cache",
        "hf-kernels": tmp_path / ".cache" / "huggingface" / "kernels",
    }
    assert get_engine("transformers").cache_state(env)["caches"] == "cold"
    fill(tmp_path / "tmp" / "torchinductor_u", 2)
    fill(tmp_path / ".triton" / "cache", 1)
    fill(tmp_path / ".cache" / "huggingface" / "kernels", 1)
    assert get_engine("transformers").cache_state(env)["caches"] == "warm"
