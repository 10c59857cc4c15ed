"""Run an SGLang benchmark module without SGLang's runtime (torch, CUDA kernels, ...).

Benchmark-only: for peers installed with `pip install --no-deps sglang` in their own venv.
`sglang/__init__.py` and `sglang/srt/utils/__init__.py` import torch; the bench clients need
none of it. So the packages are registered empty (with their real paths, so submodules still
load from the wheel) and the one torch-importing module they touch is stubbed.

    python benchmarks/support/sglang_shim.py sglang.benchmark.serving --backend sglang-oai ...
    python benchmarks/support/sglang_shim.py sglang.benchmark.rust_client --backend sglang-oai ...
"""

import importlib.machinery
import importlib.util
import runpy
import sys
import types
from pathlib import Path


def install() -> None:
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("sglang is not installed in this interpreter")
    root = Path(next(iter(spec.submodule_search_locations)))
    # Packages whose __init__ pulls in torch: registered bare, submodules load normally.
    for name, sub in [("sglang", ""), ("sglang.srt", "srt"), ("sglang.srt.utils", "srt/utils")]:
        module = types.ModuleType(name)
        module.__path__ = [str(root / sub)]
        sys.modules[name] = module
    # serving.py imports one constant from a module that imports torch.
    disagg = types.ModuleType("sglang.srt.disaggregation")
    disagg.__path__ = [str(root / "srt" / "disaggregation")]
    utils = types.ModuleType("sglang.srt.disaggregation.utils")
    utils.FAKE_BOOTSTRAP_HOST = "2.2.2.2"
    sys.modules["sglang.srt.disaggregation"] = disagg
    sys.modules["sglang.srt.disaggregation.utils"] = utils
    # Dataset loaders for datasets we never use import these at module level. transformers
    # probes for the same packages (find_spec, then their version): import its tokenizers
    # first, so it has decided before the stand-ins exist.
    try:
        from transformers import AutoTokenizer, PreTrainedTokenizerBase  # noqa: F401
    except ImportError:
        pass
    for name in ("datasets",):
        if importlib.util.find_spec(name) is None:
            sys.modules[name] = _absent(name)


def _absent(name: str) -> types.ModuleType:
    module = types.ModuleType(name)

    def __getattr__(attr):  # any use says why it fails
        def missing(*args, **kwargs):
            raise ImportError(f"{name}.{attr}: not installed in this benchmark venv")

        return missing

    module.__getattr__ = __getattr__
    # What a later probe reads (find_spec raises on a module without a spec); no file and
    # no version is how transformers tells a stand-in from an install.
    module.__spec__ = importlib.machinery.ModuleSpec(name, None)
    module.__file__ = None
    module.__version__ = "N/A"
    return module


def main() -> None:
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    module = sys.argv[1]
    install()
    sys.argv = [module, *sys.argv[2:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
