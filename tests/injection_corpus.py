"""Hostile strings that must never execute or become directives; shared by every dialect and
transport test. Each one, if it ran, would create the canary file named by CANARY_TOKEN."""

from __future__ import annotations

from pathlib import Path

__all__ = ["CANARY_NAME", "corpus"]

CANARY_NAME = "fedhpc-canary"


def corpus(canary_dir: Path) -> list[str]:
    """The corpus, aimed at `canary_dir/fedhpc-canary`: quotes, $(...), backticks, newline
    followed by a directive, ';', '&&', '|', redirections and NUL-free control characters."""
    c = str(canary_dir / CANARY_NAME)
    return [
        f"$(touch {c})",
        f"`touch {c}`",
        f"; touch {c}",
        f"&& touch {c}",
        f"|| touch {c}",
        f"| touch {c}",
        f"x'; touch {c}; echo '",
        f'x"; touch {c}; echo "',
        f"\ntouch {c}\n",
        f"x\n#SBATCH --wrap='touch {c}'",
        f"x\n#PBS -l select=1\ntouch {c}",
        f"x\n#BSUB -J evil\ntouch {c}",
        f"${{IFS}}touch${{IFS}}{c}",
        f"> {c}",
        f"$(printf touch) {c}",
        f"\\\ntouch {c}",
        f"x\r\ntouch {c}",
        f"-o{c}",
        f"--output={c}",
    ]
