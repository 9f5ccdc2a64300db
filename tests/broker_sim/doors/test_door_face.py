"""`make lint`'s rule that the import contract cannot see (scripts/check_door_face.py): doors call the
broker core's face, never reach into its parts at run time. The tree keeps it, and the check finds a
door that breaks it."""

import importlib.util

from support.paths import REPO_ROOT

SCRIPT = REPO_ROOT / "scripts" / "check_door_face.py"
spec = importlib.util.spec_from_file_location("check_door_face", SCRIPT)
check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check)


def test_no_door_reaches_into_the_core_s_parts():
    assert check.main() == 0


def test_a_door_that_reaches_into_the_store_is_named(tmp_path, monkeypatch):
    doors = tmp_path / "broker_sim" / "doors"
    doors.mkdir(parents=True)
    (doors / "bad.py").write_text("def serve(self, core):\n    core.pop_service.x()\n"
                                  "    return self._core.store.topics\n")
    (doors / "good.py").write_text("def serve(self, core):\n    return core.indexed_offset('t', 0)\n")
    monkeypatch.setattr(check, "DOORS", doors)
    assert check.main() == 1
    assert check.reaches(doors / "bad.py") == ["broker_sim/doors/bad.py:2: core.pop_service",
                                               "broker_sim/doors/bad.py:3: _core.store"]
