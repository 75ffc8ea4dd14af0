"""Profile texts that several test files write: DEFAULT.soft as another device's profile, and a
short profile built from its rules.  Line numbers matter to tests that name them (a setting of
[device] is on line 7), so the builders keep the layout fixed."""

from __future__ import annotations

from softcuda.config import default_config_path


def default_profile(device_hash: str, cpu_model: str | None = None) -> str:
    """DEFAULT.soft (a valid CPU profile) with another device hash and, if given, CPU model: a
    profile of a device that is not this machine unless the hash is this machine's."""
    text = default_config_path().read_text()
    text = text.replace("device_hash  = portable", f"device_hash  = {device_hash}")
    if cpu_model is not None:
        text = text.replace("[device]\n", f"[device]\ncpu_model = {cpu_model}\n")
    return text


def short_profile(
    rules: str,
    *,
    device_type: str = "cpu",
    device: str = "",
    device_hash: str = "portable",
    costs: str | None = None,
) -> str:
    """A profile of ``rules`` (the [ops] lines, no final newline), pooled on ``device_type``;
    ``device`` adds lines to [device] (each ending in a newline), ``costs`` a [costs] section."""
    text = (
        f"[meta]\nsoft_version = 0.1.0\ndevice_hash = {device_hash}\n\n"
        f"[device]\ntype = {device_type}\n{device}\n"
        f"[ops]\n{rules}\n\n"
        f"[pool]\ndevice = {device_type}\nblock_size = 2097152\n"
    )
    return text if costs is None else text + "\n[costs]\n" + costs
