"""Write the benchmark report's JSON schema to resources/schemas/bench-report.schema.json.

    .venv/bin/python scripts/bench_schema.py          # after changing app/core/bench/report.py

tests/core/bench/test_report.py fails while the committed schema differs from the model's.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.core.bench.report import schema_text  # noqa: E402

TARGET = ROOT / "resources" / "schemas" / "bench-report.schema.json"


def main() -> int:
    TARGET.parent.mkdir(parents=True, exist_ok=True)
    TARGET.write_text(schema_text(), encoding="utf-8")
    print(f"wrote {TARGET.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
