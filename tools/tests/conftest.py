"""tools/ is a folder of scripts, not a package: its tests import them by module name."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
