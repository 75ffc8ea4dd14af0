"""The README quotes the committed H100 profile: its excerpts must be that profile's lines.

The profile is read from results/nvidia-h100/CONFIG-as-measured.soft (the reference sweep's own
output), not the root CONFIG.soft, which the README's first command replaces with the local
machine's profile.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROFILE = ROOT / "results" / "nvidia-h100" / "CONFIG-as-measured.soft"


def excerpts() -> list[str]:
    """The lines of the README's code blocks that quote a profile (those under "## CONFIG.soft")."""
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## CONFIG.soft", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```\n(.*?)```", section, flags=re.S)
    return [line for block in blocks for line in block.splitlines() if line.strip()]


def quoted(line: str, profile: list[str]) -> bool:
    """A README line matches a profile line: exactly, or piece by piece where it elides with
    '...' (each piece in order, the first at the start), or a placeholder in <angle brackets>."""
    if "<" in line and ">" in line:
        key = line.split("=", 1)[0]
        return any(p.startswith(key) for p in profile)
    pieces = [p.strip() for p in line.split("...")]
    for candidate in profile:
        at, ok = 0, candidate.startswith(pieces[0])
        for piece in pieces:
            found = candidate.find(piece, at)
            ok = ok and found >= 0
            at = found + len(piece)
        if ok:
            return True
    return False


def test_the_readme_quotes_the_committed_profile():
    profile = PROFILE.read_text().splitlines()
    lines = excerpts()
    assert len(lines) >= 8  # the [meta], [ops], [bus] and [costs] excerpts
    stale = [line for line in lines if not quoted(line, profile)]
    assert not stale, f"README lines not in {PROFILE.name}: {stale}"


def test_a_stale_excerpt_is_caught():
    profile = PROFILE.read_text().splitlines()
    assert not quoted("add | size < 187443 = cpu_fallback", profile + ["add | size < 1874 = x"])
    assert not quoted("h2d_pinned_gbps         = 1.00", profile)
