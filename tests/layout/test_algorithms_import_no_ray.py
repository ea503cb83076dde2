"""Algorithms know no Ray (docs/architecture.md#layout). test_dependency_rule.py checks that every contract is
kept, this one among them; here: an algorithm importing Ray, directly or through another module, breaks
import-linter's "Algorithms import no Ray" contract, and it covers every module of rlsys.learners but the runtime/
subpackage, where the learner's Ray side lives."""

from __future__ import annotations

from tests.layout.test_dependency_rule import CONTRACTS, ROOT, lint

NO_RAY = next(c for c in CONTRACTS if c["name"] == "Algorithms import no Ray")
BROKEN = "Algorithms import no Ray BROKEN"


def test_an_algorithm_importing_ray_breaks_the_contract(tmp_path):
    result = lint({"rlsys/learners/digirl/shortcut.py": "import ray\n"}, tmp_path)
    assert result.returncode != 0
    assert BROKEN in result.stdout
    assert "rlsys.learners.digirl.shortcut -> ray" in result.stdout


def test_an_algorithm_reaching_ray_through_the_runtime_breaks_the_contract(tmp_path):
    shortcut = "def history(buffer):\n    from rlsys.learners.runtime.history import BufferActorHistory\n"
    result = lint({"rlsys/learners/digiq/shortcut.py": shortcut}, tmp_path)
    assert result.returncode != 0
    assert BROKEN in result.stdout
    assert "rlsys.learners.digiq.shortcut -> rlsys.learners.runtime.history" in result.stdout


def test_the_contract_names_every_module_of_learners_but_the_runtime():
    """A new module or folder in rlsys/learners/ must be listed, or nothing would keep Ray out of it."""
    folder = ROOT / "rlsys" / "learners"
    found = {f"rlsys.learners.{p.parent.name}" for p in folder.glob("*/__init__.py")}
    found |= {f"rlsys.learners.{p.stem}" for p in folder.glob("*.py") if p.stem != "__init__"}
    assert found - {"rlsys.learners.runtime"} == set(NO_RAY["source_modules"])
    assert NO_RAY["forbidden_modules"] == ["ray"]
