"""specdec: paged-KV continuous batching with structured and speculative decoding."""

from specdec import isa  # noqa: F401 - first: a forced SPECDEC_ISA caps torch's libraries
from specdec.hookspecs import hookimpl
from specdec.llm import LLM
from specdec.outputs import RequestMetrics, RequestOutput
from specdec.sampling_params import SamplingParams

__all__ = ["LLM", "SamplingParams", "RequestOutput", "RequestMetrics", "hookimpl"]
__version__ = "0.1.0"
