"""The generated protocol code is what `make protos` makes of protos/ today."""

import filecmp
import subprocess
import sys

from support.paths import REPO_ROOT

ROOT = REPO_ROOT


def test_generated_code_is_up_to_date(tmp_path):
    subprocess.run(["bash", str(ROOT / "scripts" / "gen_protos.sh"), str(tmp_path)], check=True, cwd=ROOT,
                   env={"PYTHON": sys.executable, "PATH": "/usr/bin:/bin"})
    generated = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*.py*"))
    assert generated, "protoc wrote nothing"
    for path in generated:
        assert filecmp.cmp(tmp_path / path, ROOT / path, shallow=False), (
            f"{path} differs from what protos/ generates: run `make protos` and commit the result")
