"""Choosing the torch device from the user setting (config_files/user_config.py `device`).

Nothing else in the project names a device: code receives the `torch.device` chosen here.
"""

from __future__ import annotations

import os
import platform

import torch


def choose_device(setting: str = "auto") -> torch.device:
    """ "auto" -> the first CUDA GPU when torch sees one, else the CPU; "cpu"; "cuda" or "cuda:i".

    Raises ValueError for a device this machine does not have (instead of failing later, mid-run).
    """
    if not isinstance(setting, str):
        raise ValueError(f"device setting must be a string such as 'auto', 'cpu' or 'cuda', got {setting!r}")
    name = setting.strip().lower()
    if name == "auto":
        return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    try:
        device = torch.device(name)
    except RuntimeError as e:
        raise ValueError(f"device setting {setting!r} is not a torch device: {e}") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device setting {setting!r}: this torch build or machine has no CUDA GPU (use 'auto' or 'cpu')")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ValueError(f"device setting {setting!r}: only {torch.cuda.device_count()} CUDA device(s) are visible")
    elif device.type == "mps":
        if not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
            raise ValueError(f"device setting {setting!r}: MPS is not available here")
    elif device.type != "cpu":
        raise ValueError(f"device setting {setting!r}: unsupported device type {device.type!r} (use 'auto', 'cpu' or 'cuda[:i]')")
    return device


def is_cuda(device: torch.device | str) -> bool:
    return torch.device(device).type == "cuda"


def wait_for_device(device: torch.device) -> None:
    """Block until `device` has done the work queued on it, so that a timing ending here counts it; on the CPU
    the work is done when each call returns."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def cpu_model() -> str:
    """The CPU in words: its model name, and where /proc/cpuinfo has them its family and model numbers (a bare
    "AMD EPYC" names no generation) and the bfloat16 instructions a precision probe depends on. Figures differ by
    CPU, and the machines behind one name vary: every figure says which one made it."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if not line.strip():
                    break  # the first processor's block is enough
                key, _, value = line.partition(":")
                fields[key.strip()] = value.strip()
    except OSError:
        pass
    name = fields.get("model name") or platform.processor() or "unknown CPU"
    details = [f"family {fields['cpu family']} model {fields['model']}"] if "cpu family" in fields and "model" in fields else []
    details.append(f"{os.cpu_count() or 1} cores")
    bf16 = [flag for flag in ("avx512_bf16", "amx_bf16") if flag in fields.get("flags", "").split()]
    details.append(", ".join(bf16) if bf16 else "no bf16 instructions")
    return f"{name} ({', '.join(details)})"


def machine_in_words(device: torch.device) -> str:
    """The processors a run's figures come from: the CPU, and the GPU when the run trains on one."""
    words = f"CPU {cpu_model()}"
    if device.type == "cuda":
        words += f", GPU {torch.cuda.get_device_name(device)}"
    return words
