"""softcuda's all-CPU plans against PyTorch's CPU ops, and its all-CUDA plans against PyTorch's
CUDA ops end to end from pinned memory, each library in its own process (benchmarks/rivals.py
says how each is timed).

    python benchmarks/vs_torch.py [--device cpu|cuda|both] [--min 12] [--max 26] [--step 2]
                                  [--config CONFIG.soft] [--raw FILE.json]

Without PyTorch it says so in one line and exits 2.  The reference output: results/<device>/
vs-torch.txt (benchmarks/h200.sh vstorch).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # rivals.py beside this file
import rivals  # noqa: E402


def main() -> int:
    return rivals.run(rivals.parse(rivals="torch"))[0]


if __name__ == "__main__":
    sys.exit(main())
