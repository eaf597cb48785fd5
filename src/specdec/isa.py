"""The CPU instruction-set level every CPU-specific path is chosen by.

Levels, lowest first (x86): ``eager`` (plain PyTorch: no fused kernels, no
pre-packed weights), ``avx2`` (AVX2 + FMA + F16C: AMD Zen 2/3, Intel since Haswell),
``avx512`` (AVX-512 F/BW/VL/DQ, and avx512_bf16 / VNNI where present: AMD Zen 4/5,
Intel without AMX), ``amx`` (AMX-BF16 tiles: Intel Sapphire Rapids and later). Other
architectures have ``eager`` and ``native`` (kernels built for the compiler's native
target).

The level is the highest the CPU's flags allow, decided once per process.
``SPECDEC_ISA=amx|avx512|avx2|eager`` forces a lower one, so every path can be run and
tested on a machine that has a higher one; a level the CPU cannot run falls back to
the CPU's own with one line on stderr, never an exception.
``SPECDEC_ISA_EXTENSIONS`` (a comma list such as ``avx512_vnni``, or ``none``) keeps only
those of the optional extensions (avx512_bf16, avx512_vnni), so the paths of a CPU
without them (an AVX-512 Skylake-SP) are built and tested here too; a CPU without
avx512_bf16 cannot be ``amx``. A forced level also caps
oneDNN and ATen (``ONEDNN_MAX_CPU_ISA``, ``ATEN_CPU_CAPABILITY``) where they have not
been set and not yet read, so torch's own kernels make the same choices as on such a
CPU (set them before torch is first used to be certain).
"""

from __future__ import annotations

import functools
import os
import platform
import sys
from collections.abc import Iterable

X86_LEVELS = ("eager", "avx2", "avx512", "amx")
OTHER_LEVELS = ("eager", "native")
ENV = "SPECDEC_ISA"
EXTENSIONS_ENV = "SPECDEC_ISA_EXTENSIONS"

# CPU flags (as /proc/cpuinfo spells them) each x86 level needs, on top of the level below.
_REQUIRES = {
    "avx2": frozenset({"avx2", "fma", "f16c"}),
    "avx512": frozenset({"avx512f", "avx512bw", "avx512vl", "avx512dq"}),
    "amx": frozenset({"amx_tile", "amx_bf16", "avx512_bf16"}),
}
# Compiler flags of each x86 level (on top of the level below): never -march=native,
# so a forced level builds exactly what a CPU of that level would.
_COMPILER_FLAGS = {
    "avx2": ("-mavx2", "-mfma", "-mf16c"),
    "avx512": ("-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq"),
    "amx": ("-mamx-tile", "-mamx-bf16"),
}
# Optional extensions a level uses where the CPU has them: cpuinfo flag -> compiler flag.
_OPTIONAL = {
    "avx512": {"avx512_bf16": "-mavx512bf16", "avx512_vnni": "-mavx512vnni"},
}
# Flags worth naming beside a figure (model names like "AMD EPYC" hide the generation).
_NOTABLE_FLAGS = frozenset({"avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni",
                            "amx_tile", "amx_bf16", "avx_ne_convert", "avx_vnni"})
OPTIONAL_EXTENSIONS = frozenset(cpu for opt in _OPTIONAL.values() for cpu in opt)
# What torch's libraries are capped to under a forced level.
_TORCH_CAPS = {
    "eager": {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"},
    "avx2": {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"},
    "avx512": {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16", "ATEN_CPU_CAPABILITY": "avx512"},
}
# oneDNN's AVX-512 cap by the optional extensions kept (SPECDEC_ISA_EXTENSIONS).
_ONEDNN_AVX512 = {frozenset(): "AVX512_CORE", frozenset({"avx512_vnni"}): "AVX512_CORE_VNNI"}


def is_x86() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64", "i686", "i386")


def levels() -> tuple[str, ...]:
    """This architecture's levels, lowest first."""
    return X86_LEVELS if is_x86() else OTHER_LEVELS


def cpuinfo_field(*names: str) -> str | None:
    """The first ``/proc/cpuinfo`` line starting with one of ``names`` (x86 ``flags``,
    Arm ``Features``, ``model name`` ...), its value; None where there is none."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(names):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


@functools.cache
def cpu_flags() -> frozenset[str]:
    """The flags this process's paths are chosen by: the CPU's, less the optional
    extensions ``SPECDEC_ISA_EXTENSIONS`` leaves out."""
    return kept_extensions(hardware_flags(), os.environ.get(EXTENSIONS_ENV))


@functools.cache
def hardware_flags() -> frozenset[str]:
    """The CPU's own flags (``/proc/cpuinfo``)."""
    return frozenset((cpuinfo_field("flags", "Features") or "").split())


def kept_extensions(flags: Iterable[str], keep: str | None) -> frozenset[str]:
    """``flags`` less the optional extensions not named in ``keep`` (a comma list, or
    ``none``; None, "" or ``all`` keep every one)."""
    flags = frozenset(flags)
    wanted = (keep or "all").strip().lower()
    if wanted == "all":
        return flags
    names = frozenset(n.strip() for n in wanted.split(",") if n.strip()) - {"none"}
    unknown = names - OPTIONAL_EXTENSIONS
    if unknown:
        _stderr(f"{EXTENSIONS_ENV}: {', '.join(sorted(unknown))} not among "
                f"{', '.join(sorted(OPTIONAL_EXTENSIONS))}; ignored")
    return flags - (OPTIONAL_EXTENSIONS - names)


def extensions_limited() -> bool:
    """Whether ``SPECDEC_ISA_EXTENSIONS`` hides an extension this CPU has."""
    return cpu_flags() != hardware_flags()


def highest_level(flags: Iterable[str], x86: bool = True) -> str:
    """The highest level CPU ``flags`` can run."""
    if not x86:
        return "native"
    flags = frozenset(flags)
    best, needed = "eager", frozenset()
    for level in X86_LEVELS[1:]:
        needed = needed | _REQUIRES[level]
        if not needed <= flags:
            break
        best = level
    return best


def runnable_levels() -> tuple[str, ...]:
    """Every level this CPU can run, lowest first."""
    order = levels()
    return order[: order.index(highest_level(cpu_flags(), is_x86())) + 1]


def choose_level(requested: str | None, flags: Iterable[str], x86: bool = True,
                 warn=None) -> str:
    """The level to run: ``requested`` (a name, or None/""/"auto" for the CPU's own)
    if the CPU can run it, else the CPU's own, saying why through ``warn``."""
    order = X86_LEVELS if x86 else OTHER_LEVELS
    best = highest_level(flags, x86)
    wanted = (requested or "").strip().lower()
    if wanted in ("", "auto"):
        return best
    if wanted not in order:
        if warn:
            warn(f"{ENV}={requested!r} is not one of {'|'.join(order)}; using {best}")
        return best
    if order.index(wanted) > order.index(best):
        if warn:
            warn(f"{ENV}={wanted}: this CPU cannot run it; using {best}")
        return best
    return wanted


def _stderr(message: str) -> None:
    print(f"specdec: {message}", file=sys.stderr, flush=True)


@functools.cache
def level() -> str:
    """This process's level (``SPECDEC_ISA`` or the CPU's highest), decided once."""
    chosen = choose_level(os.environ.get(ENV), cpu_flags(), is_x86(), warn=_stderr)
    if chosen != highest_level(hardware_flags(), is_x86()) or extensions_limited():
        for name, value in torch_caps(chosen).items():
            os.environ.setdefault(name, value)
    return chosen


def at_least(name: str) -> bool:
    """Whether this process's level is ``name`` or higher (same architecture)."""
    order = levels()
    return name in order and order.index(level()) >= order.index(name)


def compiler_flags(name: str, flags: Iterable[str]) -> list[str]:
    """Instruction-set flags for building the kernels at level ``name`` on a CPU
    with ``flags``."""
    if name == "native":
        return ["-march=native"]
    if name not in X86_LEVELS[1:]:
        raise ValueError(f"no kernel build for level {name!r}")
    flags = frozenset(flags)
    out: list[str] = []
    for lvl in X86_LEVELS[1 : X86_LEVELS.index(name) + 1]:
        out += _COMPILER_FLAGS[lvl]
        out += [cc for cpu, cc in _OPTIONAL.get(lvl, {}).items() if cpu in flags]
    return out


def torch_caps(name: str, flags: Iterable[str] | None = None) -> dict[str, str]:
    """Environment variables that cap torch's oneDNN and ATen to level ``name`` on a CPU
    with ``flags`` (default: this process's)."""
    caps = dict(_TORCH_CAPS.get(name, {}))
    kept = frozenset(cpu_flags() if flags is None else flags) & OPTIONAL_EXTENSIONS
    if name == "avx512" and kept in _ONEDNN_AVX512:
        caps["ONEDNN_MAX_CPU_ISA"] = _ONEDNN_AVX512[kept]
    return caps


def describe() -> str:
    """One line for logs and benchmark output: level and the CPU it was chosen on."""
    model = cpuinfo_field("model name") or platform.processor() or platform.machine()
    best = highest_level(cpu_flags(), is_x86())
    forced = "" if level() == best else f", forced by {ENV} (CPU: {best})"
    extras = sorted(cpu_flags() & _NOTABLE_FLAGS)
    if extensions_limited():
        hidden = sorted(hardware_flags() - cpu_flags())
        forced += f", {EXTENSIONS_ENV} hides {' '.join(hidden)}"
    return f"isa={level()}{forced}; cpu={model} [{' '.join(extras) or 'no avx2'}]"


def engine_summary(stats: dict) -> str:
    """What ran, from ``LLM.stats()``: level, CPU, dtype (and the KV cache's where it
    differs), weight layout, kernels. Printed by every benchmark and the server's start-up
    line, so each figure names its path."""
    kernels = "fused kernels" if stats.get("fused_kernels") else "eager PyTorch"
    threads = f"; threads={stats['threads']}" if "threads" in stats else ""
    hint = "; non-temporal weight loads" if stats.get("nontemporal_weights") else ""
    kv_dtype = stats.get("kv_cache_dtype")
    kv_cache = f"; kv_cache_dtype={kv_dtype}" if kv_dtype not in (None, stats.get("dtype")) else ""
    return (f"{describe()}; dtype={stats.get('dtype')}{kv_cache}; "
            f"weights={stats.get('weight_layout')}; {kernels}{hint}{threads}")


level()  # at import: a forced level caps torch's libraries before they read their caps
